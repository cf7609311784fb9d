"""Which worker ran which task instance: read from the REST API, checked, summarised.

Every task instance that ran records the ``hostname`` of the worker that ran it
(the CeleryExecutor's workers name themselves, see ``e2e/celery_executor.py``).
Under the CeleryExecutor the run must have spread over every worker, and nothing
may have run anywhere else; under the LocalExecutor there is one host, reported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from e2e.checks import CheckFailed
from e2e.claim_retry import CLAIM_TASK, DAG_ID

if TYPE_CHECKING:
    from e2e.driver import Driver

__all__ = ["describe", "ran_on_every_worker", "tasks_by_host", "verify"]


def tasks_by_host(task_instances: Iterable[dict[str, Any]]) -> dict[str, Counter[str]]:
    """``{hostname: Counter("dag_id.task_id")}`` over the task instances that ran.

    A task instance that never started (skipped, upstream failed) has no hostname
    and is left out.
    """
    hosts: dict[str, Counter[str]] = {}
    for ti in task_instances:
        host = ti.get("hostname")
        if host:
            hosts.setdefault(host, Counter())[f"{ti['dag_id']}.{ti['task_id']}"] += 1
    return hosts


def ran_on_every_worker(hosts: dict[str, Counter[str]], workers: Iterable[str]) -> None:
    """Every worker ran task instances, and no task instance ran anywhere else."""
    expected = set(workers)
    elsewhere = {host: sum(tasks.values()) for host, tasks in hosts.items() if host not in expected}
    if elsewhere:
        raise CheckFailed(f"task instances ran outside the workers {sorted(expected)}: {elsewhere}")
    idle = sorted(expected - set(hosts))
    if idle:
        raise CheckFailed(
            f"worker(s) {idle} ran no task instance; "
            f"{ {h: sum(t.values()) for h, t in hosts.items()} }"
        )


def describe(hosts: dict[str, Counter[str]], top: int = 4) -> str:
    """One line per host: how many task instances it ran, and of which tasks the most."""
    lines = []
    for host, tasks in sorted(hosts.items()):
        common = ", ".join(f"{task} {n}" for task, n in tasks.most_common(top))
        rest = len(tasks) - min(top, len(tasks))
        lines.append(
            f"{host}: {sum(tasks.values())} task instances ({common}"
            + (f", and {rest} more task(s))" if rest else ")")
        )
    return "; ".join(lines)


def verify(
    driver: Driver,
    dag_ids: Iterable[str],
    *,
    killed_task: str | None,
    retried_claim_run: str | None,
) -> dict[str, str]:
    """Check where the scenario's task instances ran; the summary's lines for it.

    ``killed_task`` is the id of the task instance the scenario SIGKILLed mid-batch,
    ``retried_claim_run`` the run of ``e2e/claim_retry.py``'s killed claim: the
    summary says where each of them ran.
    """
    api = driver.api
    task_instances = [ti for dag_id in dag_ids for ti in api.task_instances(dag_id)]
    hosts = tasks_by_host(task_instances)
    workers = driver.deployment.executor.worker_hostnames
    if workers:
        ran_on_every_worker(hosts, workers)
    host_of = {ti["id"]: ti.get("hostname") for ti in task_instances}
    where = []
    if killed_task is not None:
        where.append(f"the process task on {host_of.get(killed_task)}")
    if retried_claim_run is not None:
        tries = api.tries(DAG_ID, retried_claim_run, CLAIM_TASK)
        where.append(
            "the claim's "
            + ", ".join(f"try {t['try_number']} on {t.get('hostname')}" for t in tries)
        )
    return {
        "workers": describe(hosts, top=3) + (" (every worker ran tasks)" if workers else ""),
        "killed on": "; ".join(where),
    }
