"""Side-by-side runs of ``python -m bench`` on two checkouts, alternating, medians compared.

A store change that must leave rates unchanged is shown by running the same
scenarios on the code before it and after it, in turn (before, after, before,
after, ...) on the same machine, and comparing each configuration's median. One
drain moves by about 15 % from run to run, so one pair says little; alternating
spreads the machine's drift over both sides.

Every measured rate in the saved JSON is compared, the baselines' too (hand-written
SQL, pgmq-shaped): their code is the same on both sides, so their ratio shows how
much the machine moved; the store's ratio divided by its in-run baseline's is the
change itself.

    python scripts/bench_before_after.py --before ../before --after . --rounds 3 claim aged
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Path parts that name a baseline: the same code on both sides.
BASELINES = ("sql", "pgmq", "readdelete", "read_delete", "naive", "procrastinate", "handwritten")


def rates(data: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """Every ``rate`` in a saved run, named by where it sits (list items by their labels)."""
    if isinstance(data, dict):
        if isinstance(data.get("rate"), int | float) and not isinstance(data.get("rate"), bool):
            yield path, float(data["rate"])
        for key, value in data.items():
            if key != "meta":
                yield from rates(value, f"{path}/{key}" if path else str(key))
    elif isinstance(data, list):
        for index, item in enumerate(data):
            yield from rates(item, f"{path}[{_label(item, index)}]")


def _label(item: Any, index: int) -> str:
    if not isinstance(item, dict):
        return str(index)
    named = [f"{k}={item[k]}" for k in ("index", "processes", "batch", "variant") if k in item]
    return ",".join(named) or str(index)


def run_once(tree: Path, scenarios: list[str], size: str, out: Path) -> dict[str, float]:
    cmd = [sys.executable, "-m", "bench", *scenarios, *([size] if size else [])]
    cmd += ["--json", str(out), "--report", str(out.with_suffix(".md")), "--no-plot"]
    started = time.monotonic()
    subprocess.run(cmd, cwd=tree, check=True, stdout=subprocess.DEVNULL)
    print(f"  {tree.name}: {time.monotonic() - started:.0f} s", flush=True)
    return dict(rates(json.loads(out.read_text())))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="+")
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", default="--quick", help="--quick, --tiny or '' (full)")
    parser.add_argument("--json", type=Path, help="where to save every round's rates")
    args = parser.parse_args()
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="before-after-") as tmp:
        for round_number in range(args.rounds):
            print(f"round {round_number + 1} of {args.rounds}", flush=True)
            for side, tree in sides.items():
                out = Path(tmp) / f"{side}-{round_number}.json"
                runs[side].append(run_once(tree, args.scenarios, args.size, out))
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    print(report(runs))
    return 0


def report(runs: dict[str, list[dict[str, float]]]) -> str:
    names = sorted(set.intersection(*(set(r) for r in runs["before"] + runs["after"])))
    lines = [
        "| configuration | median before | median after | after ÷ before | per round |",
        "|---|---:|---:|---:|---|",
    ]
    for name in names:
        before = [r[name] for r in runs["before"]]
        after = [r[name] for r in runs["after"]]
        median_before, median_after = statistics.median(before), statistics.median(after)
        ratio = median_after / median_before if median_before else float("nan")
        rounds = " ".join(f"{a / b:.2f}" for a, b in zip(after, before, strict=True) if b)
        kind = " (baseline)" if set(re.split(r"[/\[\],=-]", name)) & set(BASELINES) else ""
        lines.append(
            f"| {name}{kind} | {median_before:,.0f} | {median_after:,.0f} | "
            f"{ratio:.2f}x | {rounds} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
