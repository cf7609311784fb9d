"""The harness's self-test (``python -m e2e --smoke``): the ``e2e_smoke`` DAG only.

It proves what the full scenario relies on -- runs triggered through the REST
API overlap, tasks reach the store, a task process found by its title dies
by SIGKILL and Airflow marks it failed -- in a minute or two.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from airflow_atomic_store import AtomicStore
from e2e.api import AirflowApi, wait_for
from e2e.deployment import Deployment
from e2e.tasks import task_process

DAG_ID = "e2e_smoke"
RUNS = 8


def run(api: AirflowApi, deployment: Deployment, say: Any) -> dict[str, Any]:
    started = time.monotonic()
    api.unpause(DAG_ID)
    victim = "smoke-victim"
    api.trigger(DAG_ID, victim, {"nap_seconds": 600, "fan_out": 1})
    for index in range(RUNS):
        api.trigger(DAG_ID, f"smoke-{index:02d}", {"nap_seconds": 1, "fan_out": 3})
    say(f"triggered {RUNS + 1} runs of {DAG_ID}")

    def running_nap() -> dict[str, Any] | None:
        tis = api.task_instances(DAG_ID, victim, task_id="nap", state="running")
        return tis[0] if tis else None

    ti = wait_for(
        running_nap, timeout=240, what="the victim's nap task to run", check=deployment.check_alive
    )
    process = wait_for(
        lambda: task_process(ti["id"], deployment.task_candidates()),
        timeout=60,
        what=f"the process of task instance {ti['id']}",
    )
    process.send_signal(signal.SIGKILL)
    say(f"SIGKILLed task process {process.pid} ({ti['task_id']} of {victim})")

    def finished() -> bool:
        runs = api.runs(DAG_ID)
        return len(runs) == RUNS + 1 and all(r["state"] in ("success", "failed") for r in runs)

    wait_for(
        finished,
        timeout=300,
        what="every smoke run to finish",
        interval=2,
        check=deployment.check_alive,
    )
    states = {r["dag_run_id"]: r["state"] for r in api.runs(DAG_ID)}
    assert states.pop(victim) == "failed", "the run whose task was killed should fail"
    assert set(states.values()) == {"success"}, states
    killed = api.task_instances(DAG_ID, victim, task_id="nap")[0]
    assert killed["state"] == "failed", killed

    with AtomicStore(deployment.store_url) as store:
        value = store.get("e2e_smoke", "runs")
    assert value == {"count": RUNS + 1}, value
    tis = sum(len(api.task_instances(DAG_ID, run_id)) for run_id in [*states, victim])
    return {
        "runs": RUNS + 1,
        "task instances": tis,
        "scenario": f"{time.monotonic() - started:.0f}s",
    }
