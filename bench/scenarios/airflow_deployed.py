"""Through Airflow, deployed (issue 33): the mapped recipe, the batch recipe and Airflow's floor.

Runs ``python -m e2e.dispatch_bench`` as a child process: the deployment ``make
e2e`` starts (LocalExecutor, PostgreSQL metadata database), one run of each DAG
after the other (see that module). The mapped recipe is measured over fewer
items than the batch recipe (``dispatch_mapped_items``): its run is two task
instances per item, and on 2 cores a thousand of them take a quarter of an
hour; items/s is a rate, so the two compare all the same.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.environment import BenchEnvironment
from bench.sizes import Sizes
from bench.timing import progress

TITLE = "Through Airflow, deployed"
ROOT = Path(__file__).resolve().parents[2]
#: the batch recipe's items/s ≥ this many times the mapped recipe's
TARGET = 20.0
LABELS = {
    "mapped": "mapped recipe (`queue_dispatcher`)",
    "floor_mapped": "its floor (same shape, no store calls)",
    "batch": "batch recipe (`batch_dispatcher`, `@task.atomic_batch`)",
    "floor_batch": "its floor (one task, no store calls)",
}


def run(env: BenchEnvironment, sizes: Sizes, *, require_extras: bool) -> dict[str, Any]:
    out, log = env.directory / "dispatch.json", env.directory / "dispatch.log"
    command = [
        sys.executable,
        "-m",
        "e2e.dispatch_bench",
        "--mapped",
        str(sizes.dispatch_mapped_items),
        "--batch",
        str(sizes.dispatch_batch_items),
        "--out",
        str(out),
    ]
    progress(f"deployed: {' '.join(command[2:])} (log {log})")
    with log.open("w") as sink:
        completed = subprocess.run(
            command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, timeout=3600
        )
    if completed.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise RuntimeError(f"the deployed dispatcher runs failed:\n{tail}")
    data: dict[str, Any] = json.loads(out.read_text())
    progress(
        "deployed: "
        + ", ".join(f"{name} {data[name]['items_per_s']:.1f} items/s" for name in LABELS)
    )
    return data


def target_check(data: dict[str, Any]) -> tuple[str, str, bool]:
    batch, mapped = data["batch"], data["mapped"]
    ratio = batch["items_per_s"] / mapped["items_per_s"]
    once = batch["exactly_once"]["ok"] and mapped["exactly_once"]["ok"]
    return (
        f"through Airflow (deployed): batch recipe ≥ {TARGET:.0f}x the mapped recipe's "
        "items/s, every item exactly once",
        f"{batch['items_per_s']:.1f} vs {mapped['items_per_s']:.2f} items/s = {ratio:.1f}x; "
        f"exactly once: {'yes' if once else 'NO'}",
        ratio >= TARGET and once,
    )


def section(data: dict[str, Any]) -> str:
    from bench.report_format import table

    body = []
    for name, label in LABELS.items():
        entry = data[name]
        once = entry.get("exactly_once")
        body.append(
            [
                label,
                f"{entry['items']:,}",
                entry["state"],
                str(entry.get("task_instances", "")),
                f"{entry['seconds']:.1f}",
                f"{entry['items_per_s']:.2f}",
                f"{entry['store_seconds']:.2f}",
                f"{100 * entry['store_share']:.1f} %",
                ("yes" if once["ok"] else "**NO**") if once else "-",
            ]
        )
    check = target_check(data)
    beyond = {
        name: 1 - data[floor]["seconds"] / data[name]["seconds"]
        for name, floor in (("mapped", "floor_mapped"), ("batch", "floor_batch"))
    }
    return "\n".join(
        [
            "A real deployment as `make e2e` runs it (LocalExecutor, parallelism "
            f"{data.get('parallelism', 8)}, PostgreSQL for the metadata and the store), one run "
            "at a time, items enqueued beforehand. Seconds from the run's start to its end "
            "(Airflow's own `start_date`/`end_date`); *store* is the time PostgreSQL spent "
            "executing statements in the store's database during the run "
            "(`pg_stat_database.active_time`: the server side of every store call); *exactly "
            "once*: every row `done` with one side-effect record, outcome `done`. The mapped "
            "recipe runs fewer items (a task instance per item); items/s compares them.",
            "",
            *table(
                [
                    "DAG",
                    "items",
                    "state",
                    "task instances",
                    "seconds",
                    "items/s",
                    "store s (server)",
                    "store share (server)",
                    "exactly once",
                ],
                body,
            ),
            "",
            f"Target: {check[0]}: {check[1]}, {'met' if check[2] else '**missed**'}. "
            f"Each recipe against its floor: mapped "
            f"{data['mapped']['items_per_s'] / data['floor_mapped']['items_per_s']:.2f}x, "
            f"batch {data['batch']['items_per_s'] / data['floor_batch']['items_per_s']:.2f}x "
            "of the floor's items/s (same item counts): the part of a run beyond its floor "
            f"(the store calls with their Python, and the recipe's own) is "
            f"{100 * beyond['mapped']:.0f} % of the mapped run and {100 * beyond['batch']:.0f} % "
            "of the batch run"
            + (
                " (below zero: the floor's run was the slower one, within this machine's noise)."
                if min(beyond.values()) < 0
                else "."
            ),
        ]
    )
