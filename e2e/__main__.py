"""``python -m e2e``: start a deployment, run the scenario, assert, shut everything down.

Exit status 0 when every assertion held and no process was left behind; 1 on
any failure (the component logs stay in ``.e2e/logs`` for a post-mortem); 2
on a usage error. SIGINT, SIGTERM, SIGHUP and the overall time limit all end
the run through the same clean-up.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

from e2e.api import AirflowApi, wait_for
from e2e.celery_executor import CelerySetup
from e2e.deployment import USERNAME, Deployment, DeploymentError, Executor, LocalExecutorSetup, tail

PROJECT = Path(__file__).resolve().parent.parent
#: ``--executor``: what runs the task processes (e2e/deployment.py, e2e/celery_executor.py).
EXECUTORS: dict[str, type[Executor]] = {"local": LocalExecutorSetup, "celery": CelerySetup}


class Interrupted(BaseException):
    """A signal or the overall time limit ended the run."""


def say(message: str) -> None:
    print(f"[e2e {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    name = "time limit" if signum == signal.SIGALRM else signal.Signals(signum).name
    raise Interrupted(name)


def wait_until_healthy(api: AirflowApi, deployment: Deployment, timeout: float) -> None:
    """Wait until the API server answers and reports every component healthy."""

    def healthy() -> bool:
        health = api.health()
        if health is None:
            return False
        parts = ("metadatabase", "scheduler", "dag_processor", "triggerer")
        if not all((health.get(part) or {}).get("status") == "healthy" for part in parts):
            return False
        # The execution API (what task processes call) loads on its first request: warm it.
        return api.execution_health() and deployment.workers_ready()

    wait_for(
        healthy,
        timeout=timeout,
        what="every component to report healthy",
        interval=2,
        check=deployment.check_alive,
    )


def wait_for_dags(
    api: AirflowApi, deployment: Deployment, dag_ids: list[str], timeout: float
) -> None:
    """Wait until the DAG processor has parsed every DAG in ``dag_ids``; fail on import errors."""

    def parsed() -> bool:
        errors = api.import_errors()
        if errors:
            details = "\n".join(f"{e['filename']}:\n{e['stack_trace']}" for e in errors)
            raise DeploymentError(f"the DAG files have import errors:\n{details}")
        return all(api.dag(dag_id) is not None for dag_id in dag_ids)

    wait_for(
        parsed,
        timeout=timeout,
        what=f"the DAGs {dag_ids} to be parsed",
        interval=2,
        check=deployment.check_alive,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e", description=__doc__)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="run only the harness's own DAG (e2e/dags), to test the harness",
    )
    parser.add_argument(
        "--executor",
        choices=sorted(EXECUTORS),
        default="local",
        help="local: the LocalExecutor (default); celery: a Redis broker and two Celery workers",
    )
    parser.add_argument(
        "--parallelism",
        type=int,
        default=8,
        help="[core] parallelism: task processes at once (default 8, at least 4)",
    )
    parser.add_argument(
        "--items",
        type=int,
        help="items the producer enqueues for the dispatchers to drain (default 500)",
    )
    parser.add_argument(
        "--no-browser",
        action="store_true",
        help="skip the UI page check in headless Chromium",
    )
    parser.add_argument(
        "--screenshot",
        type=Path,
        help="save the page's screenshot here (default: atomic-store-page.png in --root; "
        "docs/img/atomic-store-page.png refreshes the docs' image)",
    )
    parser.add_argument(
        "--no-events",
        action="store_true",
        help="skip the event-driven dispatcher's phase (its idle window, floor and latency)",
    )
    parser.add_argument(
        "--no-semaphore",
        action="store_true",
        help="skip the 2-slot semaphore phase (deferred waiting in the triggerer)",
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=0.0,
        help="keep the event-driven dispatcher's queue idle at least this long before its "
        "items (default 0: the main drain's duration; 600 for the 10-minute figure)",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=1200.0,
        help="give up (and clean up) after this many seconds (default 1200)",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=PROJECT / ".e2e",
        help="working directory: AIRFLOW_HOME, logs, database (default .e2e)",
    )
    parser.add_argument(
        "--dags-folder",
        type=Path,
        help="serve these DAG files instead (default: example_dags, or e2e/dags with --smoke)",
    )
    args = parser.parse_args(argv)
    if args.parallelism < 4:
        parser.error("--parallelism must be at least 4")
    if args.items is not None and args.items < 100:
        parser.error("--items must be at least 100 (the scenario kills a batch after 40 are done)")

    dags_folder = args.dags_folder or PROJECT / ("e2e/dags" if args.smoke else "example_dags")
    # The scenario also runs a DAG of its own (e2e/scenario_dags), in a second bundle.
    extra_bundles = {} if args.smoke else {"e2e-scenario": PROJECT / "e2e" / "scenario_dags"}
    deployment = Deployment(
        args.root.resolve(),
        dags_folder.resolve(),
        parallelism=args.parallelism,
        extra_bundles=extra_bundles,
        say=say,
        executor=EXECUTORS[args.executor](),
    )
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM):
        signal.signal(signum, _interrupt)
    signal.alarm(int(args.time_limit))
    started = time.monotonic()
    status = 1
    summary: dict[str, Any] = {}
    api: AirflowApi | None = None
    try:
        deployment.start()
        api = AirflowApi(deployment.api_url, USERNAME, deployment.password)
        wait_until_healthy(api, deployment, timeout=180)
        say(f"deployment healthy after {time.monotonic() - started:.0f}s at {deployment.api_url}")
        if args.smoke:
            from e2e import smoke

            wait_for_dags(api, deployment, [smoke.DAG_ID], timeout=180)
            summary = smoke.run(api, deployment, say)
        else:
            from e2e import scenario
            from e2e.driver import Options

            wait_for_dags(api, deployment, list(scenario.ALL_DAG_IDS), timeout=180)
            options = Options(
                browser=not args.no_browser,
                events=not args.no_events,
                semaphore=not args.no_semaphore,
                idle_seconds=args.idle_seconds,
                screenshot=args.screenshot.resolve() if args.screenshot else None,
            )
            if args.items is not None:
                options = dataclasses.replace(options, items=args.items)
            summary = scenario.run(api, deployment, say, options)
        status = 0
    except Interrupted as exc:
        say(f"FAILED: interrupted by {exc}")
        _dump_logs(deployment)
    except Exception:
        say("FAILED:\n" + traceback.format_exc().rstrip())
        _dump_logs(deployment)
    finally:
        signal.alarm(0)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)  # let the clean-up finish
        if api is not None:
            api.close()
        try:
            cpu = deployment.cpu_seconds()
            summary["cpu"] = ", ".join(f"{name} {seconds:.0f}s" for name, seconds in cpu.items())
        except Exception as exc:  # a statistic: never in the way of the clean-up
            summary["cpu"] = f"unknown ({exc})"
        killed = deployment.stop()
        if killed:
            say(f"had to SIGKILL on shutdown: {', '.join(killed)}")
        leftovers = deployment.leftovers()
        if leftovers:
            say(f"FAILED: processes left behind: {[p.pid for p in leftovers]}")
            status = 1
    summary = {"executor": deployment.executor.name, **summary}
    summary["duration"] = f"{time.monotonic() - started:.0f}s (start, scenario, shutdown)"
    width = max(len(key) for key in summary)
    say("summary\n" + "\n".join(f"  {key:<{width}}  {value}" for key, value in summary.items()))
    say("PASSED" if status == 0 else f"FAILED (logs in {deployment.logs})")
    return status


def _dump_logs(deployment: Deployment) -> None:
    for name in (
        "scheduler",
        "api-server",
        "dag-processor",
        "triggerer",
        *_worker_logs(deployment),
    ):
        print(tail(deployment.logs / f"{name}.log", lines=25), file=sys.stderr)


def _worker_logs(deployment: Deployment) -> tuple[str, ...]:
    return tuple(name for name in deployment.executor.task_hosts if name != "scheduler")


if __name__ == "__main__":
    sys.exit(main())
