"""The benchmark harness still runs: ``python -m bench --tiny`` end to end, in seconds.

Runs as a child process (as ``make bench`` does), so the harness's own
PostgreSQL server, spawned workers and warnings stay out of this session.
It needs no ``bench`` extra: in tiny mode the harness skips procrastinate
and the plot when they are not installed. The Airflow scenario costs about
half a minute (Airflow's first ``dag.test()``), so it runs only under
``ATOMIC_STORE_LONG=1``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = [
    "claim",
    "latency",
    "hotkey",
    "scale",
    "sqlite",
    "aged",
    "idempotency",
    "wakeup",
    "soak",
]


def test_the_benchmark_harness_runs_every_scenario_and_writes_a_report(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    scenarios = [*SCENARIOS, "airflow"] if os.environ.get("ATOMIC_STORE_LONG") else SCENARIOS
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--tiny",
            *scenarios,
            "--report",
            str(report),
            "--no-plot",
            "--json",
            str(tmp_path / "data.json"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    text = report.read_text()
    for heading in ("## Machine", "## Targets", "Claim throughput", "Single-operation latency"):
        assert heading in text
    for heading in ("Hot key contention", "Scale", "SQLite default", "Aged queue", "Storage soak"):
        assert heading in text
    assert "limit-1 claim p50 ≤ 1.25x a guarded single-row update" in text  # aged targets
    assert "| client CPU µs/row | server CPU µs/row |" in text  # the drains' CPU per row
    assert "with an idempotency key ≤ 1.3x the same call without one" in text
    assert "**NO**" not in text  # no increment was lost
    assert "| 0 |" in text  # the atomic claim handed out no row twice


def test_the_full_report_compares_every_saved_run_with_the_current_one() -> None:
    """``docs/benchmarks.md``'s store-changes table is rebuilt from the saved runs."""
    import json

    from bench import compare

    current = json.loads((ROOT / "bench" / "results" / "full.json").read_text())
    section = compare.section(current)
    assert section is not None
    header = next(line for line in section.splitlines() if line.startswith("| figure"))
    labels = [label for label, path, _ in compare.SAVED_RUNS if path.exists()]
    assert header == "| " + " | ".join(["figure", *labels, "this run"]) + " |"
    assert "| hot key increments (ops/s) |" in section


def test_the_airflow_scenario_times_the_store_without_changing_its_signatures() -> None:
    """The operators take their defaults from the store's signatures (``store_defaults``),
    and the Airflow scenario's child wraps the store's methods before it imports them."""
    import inspect

    from airflow_atomic_store import AtomicStore
    from bench.airflow_dispatch import StoreTimer

    timed = StoreTimer(())._wrap(AtomicStore.atomic_claim)
    assert inspect.signature(timed) == inspect.signature(AtomicStore.atomic_claim)
