"""Command line: choose the scenarios and the size, run them, write the report and plot.

Only a full run of every scenario writes ``docs/benchmarks.md`` and
``docs/img/benchmarks.png`` by default (and its raw data to
``bench/results/full.json``), so a quick look never overwrites the page with
small-size numbers; ``--report``/``--plot`` send any run anywhere, and
``--from-json`` rebuilds the page from saved data without measuring again.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import plot, procrastinate_queue, report
from bench.environment import BenchEnvironment, describe_machine
from bench.scenarios import SCENARIOS
from bench.sizes import MODES, Sizes
from bench.timing import now, progress

ROOT = Path(__file__).resolve().parents[1]
DOCS_REPORT = ROOT / "docs" / "benchmarks.md"
DOCS_PLOT = ROOT / "docs" / "img" / "benchmarks.png"
FULL_JSON = ROOT / "bench" / "results" / "full.json"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "scenarios", nargs="*", choices=[*SCENARIOS, []], help="default: all of them"
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes, under a minute")
    size.add_argument(
        "--tiny",
        action="store_true",
        help="smoke-test sizes; tolerates a missing bench extra (skips procrastinate, the plot)",
    )
    parser.add_argument("--report", type=Path, help="Markdown report path")
    parser.add_argument("--plot", type=Path, help="PNG plot path")
    parser.add_argument("--no-plot", action="store_true", help="skip the figure")
    parser.add_argument("--json", type=Path, help="where to save the raw data")
    parser.add_argument("--from-json", type=Path, help="only rebuild report and plot from data")
    parser.add_argument(
        "--merge-into",
        type=Path,
        help="put the chosen scenarios' data into a saved run's data (bench/results/full.json), "
        "each stamped with its own run, and rebuild the page from it (default: docs/)",
    )
    return parser


def _outputs(args: argparse.Namespace, sizes: Sizes, everything: bool) -> tuple[Path, Path, Path]:
    if sizes.mode == "full" and everything:
        defaults = (DOCS_REPORT, DOCS_PLOT, FULL_JSON)
    else:
        scratch = Path(tempfile.gettempdir()) / f"atomic-bench-{sizes.mode}"
        defaults = (scratch / "benchmarks.md", scratch / "benchmarks.png", scratch / "data.json")
    return args.report or defaults[0], args.plot or defaults[1], args.json or defaults[2]


def _measure(names: list[str], sizes: Sizes) -> dict[str, Any]:
    require_extras = sizes.mode != "tiny"
    if require_extras and not procrastinate_queue.available() and "claim" in names:
        raise SystemExit("procrastinate is missing: run `make bench` (bench group)")
    started = now()
    data: dict[str, Any] = {}
    machine = describe_machine()
    with BenchEnvironment() as env:
        for name in names:
            progress(f"scenario {name}: start ({sizes.mode})")
            data[name] = SCENARIOS[name].run(env, sizes, require_extras=require_extras)
    data["meta"] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "mode": sizes.mode,
        "seconds": now() - started,
        "machine": machine,
        "sizes": sizes.__dict__,
    }
    return data


def _write(data: dict[str, Any], report_path: Path, plot_path: Path | None, tiny: bool) -> None:
    plot_name = None
    if plot_path is None:
        pass
    elif plot.available():
        if plot.draw(data, plot_path):
            plot_name = plot_path.name
            progress(f"plot: {plot_path}")
    elif plot_path.exists():  # rebuilding the page only: keep the figure already drawn
        plot_name = plot_path.name
        progress(f"matplotlib is missing: {plot_path} kept as it is")
    elif not tiny:
        raise SystemExit("matplotlib is missing: run `make bench` (bench group)")
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(report.render(data, plot_name=plot_name))
    progress(f"report: {report_path}")


def _merge(args: argparse.Namespace, names: list[str], sizes: Sizes) -> int:
    """Measure ``names`` and put them into the saved run at ``args.merge_into``.

    The page keeps the saved run's other scenarios and its plot (not redrawn);
    each merged section names the run it comes from, so figures of two runs are
    never read as one.
    """
    measured = _measure(names, sizes)
    meta = measured.pop("meta")
    stamp = {
        "date": meta["date"],
        "mode": meta["mode"],
        "load": meta["machine"]["load average at start"],
        "code": meta["machine"]["store code"],
    }
    saved = json.loads(args.merge_into.read_text())
    for name in names:
        saved[name] = {**measured[name], "run": stamp}
    args.merge_into.write_text(json.dumps(saved, indent=1, default=str))
    report_path = args.report or DOCS_REPORT
    plot_name = DOCS_PLOT.name if DOCS_PLOT.exists() and report_path == DOCS_REPORT else None
    report_path.write_text(report.render(saved, plot_name=plot_name))
    progress(f"merged {', '.join(names)} into {args.merge_into}; report: {report_path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.from_json:
        data = json.loads(args.from_json.read_text())
        tiny = data["meta"]["mode"] == "tiny"
        _write(data, args.report or DOCS_REPORT, args.plot or DOCS_PLOT, tiny)
        return 0
    sizes = MODES["quick" if args.quick else "tiny" if args.tiny else "full"]
    names = args.scenarios or list(SCENARIOS)
    if args.merge_into:
        return _merge(args, names, sizes)
    report_path, plot_path, json_path = _outputs(args, sizes, everything=not args.scenarios)
    data = _measure(names, sizes)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(data, indent=1, default=str))
    _write(data, report_path, None if args.no_plot else plot_path, sizes.mode == "tiny")
    print(report_path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
