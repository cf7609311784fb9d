"""procrastinate, the job-queue library compared against, on its own database.

Jobs are deferred through procrastinate's own job manager, and the workers
run procrastinate's own fetch (``procrastinate_fetch_job_v2``: one job per
call, ``FOR UPDATE SKIP LOCKED``, status ``todo`` → ``doing``) and, in the
``finish`` variant, its finish (``doing`` → ``succeeded``) — the job manager
calls a procrastinate worker makes per job, without the task-running and
polling machinery around them, so the figure is its best-case fetch rate.

procrastinate is a bench-only dependency: :func:`available` lets the tiny
smoke mode skip it when the ``bench`` extra is not installed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from bench.timing import now

_TASK = "bench.noop"


def available() -> bool:
    try:
        import procrastinate  # noqa: F401
    except ImportError:
        return False
    return True


def version() -> str:
    from importlib.metadata import version as dist_version

    return dist_version("procrastinate")


def prepare(url: str, jobs: int) -> None:
    """Apply procrastinate's schema once, empty its tables and defer ``jobs`` jobs."""
    import procrastinate
    from procrastinate.jobs import Job

    with psycopg.connect(url, autocommit=True) as conn:
        installed = conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL").fetchone()
    app = procrastinate.App(connector=procrastinate.SyncPsycopgConnector(conninfo=url))
    with app.open():
        if not (installed and installed[0]):
            app.schema_manager.apply_schema()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("TRUNCATE procrastinate_jobs, procrastinate_workers CASCADE")
        for first in range(0, jobs, 5000):
            batch = [
                Job(
                    queue="default",
                    task_name=_TASK,
                    lock=None,
                    queueing_lock=None,
                    task_kwargs={"payload": i},
                )
                for i in range(first, min(first + 5000, jobs))
            ]
            app.job_manager.batch_defer_jobs(batch)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE procrastinate_jobs")


def drain(barrier: Any, url: str, finish: bool, cap_seconds: float) -> dict[str, Any]:
    """One procrastinate worker's fetch (and finish) loop, timed like the store's drains."""
    return asyncio.run(_drain(barrier, url, finish, cap_seconds))


async def _drain(barrier: Any, url: str, finish: bool, cap_seconds: float) -> dict[str, Any]:
    import procrastinate
    from procrastinate.jobs import Status

    connector = procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=2)
    app = procrastinate.App(connector=connector)
    async with app.open_async():
        manager = app.job_manager
        worker_id = await manager.register_worker()
        check = await psycopg.AsyncConnection.connect(url, autocommit=True)
        barrier.wait(timeout=120)
        start = now()
        stop_at = start + cap_seconds
        keys: list[str] = []
        calls, capped = 0, False
        while True:
            job = await manager.fetch_job(queues=None, worker_id=worker_id)
            calls += 1
            if job is not None:
                if finish:
                    await manager.finish_job(job, status=Status.SUCCEEDED, delete_job=False)
                keys.append(str(job.id))
            else:
                cursor = await check.execute(
                    "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status = 'todo')"
                )
                row = await cursor.fetchone()
                if not (row and row[0]):
                    break
            if now() > stop_at:
                capped = True
                break
        end = now()
        await check.close()
    return {"start": start, "end": end, "keys": keys, "calls": calls, "capped": capped}
