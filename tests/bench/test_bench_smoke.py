"""The benchmark harness still runs: ``python -m bench --tiny`` end to end, in seconds.

Runs as a child process (as ``make bench`` does), so the harness's own
PostgreSQL server, spawned workers and warnings stay out of this session.
It needs no ``bench`` extra: in tiny mode the harness skips procrastinate
and the plot when they are not installed. ``make test`` runs one scenario (the
harness, its server and its report); every scenario, a few minutes in all, is
marked ``slow`` for ``make test-all``. The Airflow scenarios cost a minute or more
(Airflow's first ``dag.test()``; a whole deployment), so they run only under
``ATOMIC_STORE_LONG=1``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    "lifecycle",
    "delete",
    "enqueue",
    "waiters",
]
#: minutes each (a deployment, or Airflow's first ``dag.test()``): only under ATOMIC_STORE_LONG
LONG_SCENARIOS = ["airflow", "deployed"]


def run_tiny(scenarios: list[str], tmp_path: Path) -> str:
    """``python -m bench --tiny SCENARIOS``; the report it wrote."""
    report = tmp_path / "benchmarks.md"
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
    return report.read_text()


def test_the_benchmark_harness_runs_a_scenario_and_writes_a_report(tmp_path: Path) -> None:
    text = run_tiny(["claim"], tmp_path)
    for heading in ("## Machine", "## Targets", "Claim throughput"):
        assert heading in text
    assert "| 0 |" in text  # the atomic claim handed out no row twice


@pytest.mark.slow
def test_the_benchmark_harness_runs_every_scenario_and_writes_a_report(tmp_path: Path) -> None:
    scenarios = [*SCENARIOS, *LONG_SCENARIOS] if os.environ.get("ATOMIC_STORE_LONG") else SCENARIOS
    text = run_tiny(scenarios, tmp_path)
    for heading in ("## Machine", "## Targets", "Claim throughput", "Single-operation latency"):
        assert heading in text
    for heading in ("Hot key contention", "Scale", "SQLite default", "Aged queue", "Storage soak"):
        assert heading in text
    assert "limit-1 claim p50 ≤ 1.25x a guarded single-row update" in text  # aged targets
    assert (
        text.count("batch 10: delete-mode drain ≥ 1.0x pgmq-shaped read+delete") >= 3
    )  # aged, delete
    assert "## 13. Delete-mode drain" in text
    assert "(f) store, delete mode rows/s" in text and "(g) pgmq-shaped pop rows/s" in text
    assert "Lifecycle" in text and "finish+archive ≥ 1.0x pgmq (send → read → archive)" in text
    assert "## 14. Enqueue" in text and "bulk ÷ pgmq send_batch ≥ 1x" in text
    assert "Every item retired exactly once: yes" in text
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


def test_the_deployed_section_reports_each_run_and_the_batch_target() -> None:
    """Rendered from a run's data as ``python -m e2e.dispatch_bench`` writes it."""
    from bench.scenarios import airflow_deployed

    def entry(dag_id: str, items: int, seconds: float, once: bool | None) -> dict:
        result = {"dag_id": dag_id, "state": "success", "items": items, "seconds": seconds}
        result.update(items_per_s=items / seconds, store_seconds=0.5, store_share=0.5 / seconds)
        if once is not None:
            result["exactly_once"] = {"ok": once}
            result["task_instances"] = 1
        return result

    data = {
        "mapped": entry("queue_dispatcher", 200, 100.0, True),
        "floor_mapped": entry("bench_floor_mapped", 200, 80.0, None),
        "batch": entry("batch_dispatcher", 1000, 20.0, True),
        "floor_batch": entry("bench_floor_batch", 1000, 2.0, None),
    }
    text = airflow_deployed.section(data)
    assert "50.0 vs 2.00 items/s = 25.0x; exactly once: yes, met" in text
    assert "20 % of the mapped run and 90 % of the batch run" in text
    data["batch"]["exactly_once"]["ok"] = False
    assert airflow_deployed.target_check(data)[2] is False
