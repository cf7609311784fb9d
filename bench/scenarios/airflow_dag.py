"""Scenario 6: a dispatcher DAG (claim N, map a task over the rows, mark each done).

Runs in a child process with its own ``AIRFLOW_HOME`` (see
:mod:`bench.airflow_dispatch`), on both backends. The first ``dag.test()`` of
a process pays Airflow's warm-up, so it is reported apart from the runs
that follow. The share in the store is the time inside ``atomic_claim`` and
``atomic_update`` over the run's wall time: what is left is Airflow's own
scheduling, task start-up and XCom traffic.
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

TITLE = "Through Airflow"
ROOT = Path(__file__).resolve().parents[2]


def _run_child(env: BenchEnvironment, url: str, sizes: Sizes, name: str) -> dict[str, Any]:
    out = env.directory / f"airflow-{name}.json"
    log = env.directory / f"airflow-{name}.log"
    command = [
        sys.executable,
        "-m",
        "bench.airflow_dispatch",
        "--store-url",
        url,
        "--rows",
        str(sizes.dag_rows),
        "--runs",
        str(sizes.dag_runs),
        "--out",
        str(out),
    ]
    with log.open("w") as sink:
        completed = subprocess.run(
            command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, timeout=1800
        )
    if completed.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise RuntimeError(f"the Airflow dispatcher run failed ({name}):\n{tail}")
    return dict(json.loads(out.read_text()))


def run(env: BenchEnvironment, sizes: Sizes, *, require_extras: bool) -> dict[str, Any]:
    data: dict[str, Any] = {"rows": sizes.dag_rows, "backends": {}}
    for name in sizes.dag_backends:
        url = (
            env.postgres_url("airflow_store")
            if name == "postgres"
            else env.sqlite_url("airflow-store")
        )
        result = _run_child(env, url, sizes, name)
        data["backends"][name] = result
        last = result["runs"][-1]
        progress(
            f"airflow {name}: {last['wall']:.1f} s per run, {last['store']:.2f} s in the store, "
            f"state {last['state']}"
        )
    return data


def section(data: dict[str, Any]) -> str:
    from bench.report_format import table

    body = []
    for name, result in data["backends"].items():
        for index, run in enumerate(result["runs"]):
            label = "first (warm-up)" if index == 0 else f"run {index}"
            body.append(
                [
                    name,
                    label,
                    run["state"],
                    f"{run['wall']:.2f}",
                    f"{run['store'] * 1000:.0f}",
                    str(run["calls"]),
                    f"{100 * run['store'] / run['wall']:.1f}%",
                ]
            )
    return "\n".join(
        [
            f"`dag.test()` of a DAG that claims {data['rows']} rows, maps a task over them and "
            f"marks each row done behind a `claimedBy` guard ({2 * data['rows'] + 2} task "
            "instances). Store = time inside `atomic_claim`/`atomic_update`.",
            "",
            *table(
                [
                    "backend",
                    "run",
                    "state",
                    "wall s",
                    "store ms",
                    "store calls",
                    "share in the store",
                ],
                body,
            ),
        ]
    )
