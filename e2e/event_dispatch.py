"""The event-driven dispatcher in the deployment: an idle queue, then items at random moments.

``event_driven_dispatcher`` (example_dags/event_driven_dispatcher.py) is scheduled on
an asset whose watcher is a ``ClaimableRowsTrigger`` on ``event_ops``. The phase
runs around the main scenario (``e2e/scenario.py``):

1. **Before it** (:meth:`EventDispatch.arm`): the DAG is unpaused and its file
   re-parsed (Airflow registers an asset's watcher only for an unpaused DAG, when
   it parses the file), and the harness waits until the asset has its watcher.
   From then on ``event_ops`` is idle: while the main scenario drains its own queue,
   no dispatcher run may be created, and the triggerer's connections to the store
   and its CPU are read at both ends of that window.
2. **After it** (:meth:`EventDispatch.run`):

   * *the floor*: ``e2e_floor``, a one-task DAG, is triggered through the REST API
     ``FLOOR_RUNS`` times, one after the other; each is timed from the request to
     its task's start. That is Airflow's own share of any "enqueue → claimed",
     which no provider can remove;
   * *the items*: the harness (the producer) enqueues ``EVENT_ITEMS`` items into
     ``event_ops`` at random moments (exponential gaps, so bursts and pauses), each
     stamped ``enqueuedAt``; the dispatcher's runs claim them (``claimedAt``);
   * then it checks that every item was processed exactly once (one effect each,
     each claimed by one run, one mapped task per claimed row) and reports the
     latency enqueue → claimed (p50/p95/max) beside the floor's, and how many
     dispatcher runs the trigger started and how many of them claimed nothing.

The latency targets (p50 within 1 s of the floor, p95 within 3 s) are reported,
not asserted: on a shared 2-core machine they are a measurement. What is asserted
does not depend on timing: exactly-once, and no run for an idle queue.
"""

from __future__ import annotations

import math
import random
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import psutil
import psycopg

from airflow_atomic_store import AtomicStore, timestamps
from e2e import checks
from e2e.api import TERMINAL_RUN_STATES, wait_for
from e2e.deployment import STORE_DATABASE, processes_in_sessions

if TYPE_CHECKING:
    from e2e.driver import Driver

# As in example_dags/event_driven_dispatcher.py and e2e/scenario_dags/e2e_floor.py.
DISPATCHER = "event_driven_dispatcher"
FLOOR = "e2e_floor"
DAG_IDS = (DISPATCHER, FLOOR)
ASSET = "atomic_store_event_ops"
TABLE, EFFECTS_TABLE = "event_ops", "event_ops_effects"
CLAIM_TASK, PROCESS_TASK, FLOOR_TASK = "drain", "process", "start"
# The scheduled recipe, for the figure beside the event-driven one.
SCHEDULED = "queue_dispatcher"

EVENT_ITEMS = 40
MEAN_GAP_SECONDS = 1.5  # between two arrivals, on average (exponential)
FLOOR_RUNS = 6
WATCHER_TIMEOUT = 180.0
DRAIN_TIMEOUT = 600.0
#: What a triggerer holds per store however many of its triggers wait: the shared
#: ``LISTEN`` connection and the shared reader (docs/waiting.md, "How many can wait").
TRIGGERER_CONNECTIONS = 2
SEED = 15  # the arrivals' random moments: the same in every run


@dataclass
class IdleWindow:
    """What the triggerer cost while ``event_ops`` was idle."""

    started: float = 0.0  # monotonic seconds
    cpu_at_start: float = 0.0  # the triggerer's CPU seconds
    connections_at_start: int = 0
    summary: dict[str, str] = field(default_factory=dict)


class EventDispatch:
    """The event-driven phase of one e2e run; :meth:`arm` first, :meth:`run` at the end."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.idle = IdleWindow()

    # -- before the main scenario -------------------------------------------------------------

    def arm(self) -> None:
        """Unpause the dispatcher, have its file re-parsed, wait for the asset's watcher."""
        api, say = self.driver.api, self.driver.say
        for dag_id in DAG_IDS:
            api.unpause(dag_id)
        dag = api.dag(DISPATCHER)
        assert dag is not None  # __main__ waited for every DAG to be parsed
        api.request_reparse(dag["file_token"])
        started = time.monotonic()
        wait_for(
            lambda: api.asset_watchers(ASSET),
            timeout=WATCHER_TIMEOUT,
            what=f"the watcher of asset {ASSET} (unpaused {DISPATCHER}, file re-parse requested)",
            interval=2,
            check=self.driver.deployment.check_alive,
        )
        say(f"{DISPATCHER}: watcher registered {time.monotonic() - started:.0f}s after unpausing")
        if api.runs(DISPATCHER):
            raise checks.CheckFailed(f"{DISPATCHER} has runs before anything was enqueued")
        # Let the triggerer pick the new trigger up (it polls for triggers every few seconds).
        wait_for(
            lambda: self._trigger_connections() >= 1,
            timeout=WATCHER_TIMEOUT,
            what="the triggerer to start the watcher's trigger (a LISTEN connection)",
            interval=1,
            check=self.driver.deployment.check_alive,
        )
        self.idle = IdleWindow(
            started=time.monotonic(),
            cpu_at_start=self._triggerer_cpu(),
            connections_at_start=self._connections_while_waiting(),
        )

    # -- after the main scenario --------------------------------------------------------------

    def run(self, store: AtomicStore, idle_seconds: float) -> dict[str, str]:
        """Close the idle window (after ``idle_seconds`` at least), then the floor and the items."""
        say = self.driver.say
        remaining = idle_seconds - (time.monotonic() - self.idle.started)
        if remaining > 0:
            say(f"{TABLE} stays idle {remaining:.0f}s more ({idle_seconds:.0f}s in all)")
            while remaining > 0:
                self.driver.deployment.check_alive()
                time.sleep(min(remaining, 5.0))
                remaining = idle_seconds - (time.monotonic() - self.idle.started)
        summary = {"event idle": self._close_idle_window()}
        floor = self._floor()
        summary["event floor"] = _describe(floor) + f" (trigger → task start, {len(floor)} runs)"
        enqueued = self._produce(store)
        summary.update(self._verify(store, enqueued, floor))
        return summary

    def _close_idle_window(self) -> str:
        seconds = time.monotonic() - self.idle.started
        runs = self.driver.api.runs(DISPATCHER)
        connections = self._connections_while_waiting()
        cpu = self._triggerer_cpu() - self.idle.cpu_at_start
        if runs:
            raise checks.CheckFailed(
                f"{len(runs)} {DISPATCHER} run(s) were created while {TABLE} was idle "
                f"for {seconds:.0f}s: {[run['dag_run_id'] for run in runs][:5]}"
            )
        held = {self.idle.connections_at_start, connections}
        if max(held) > TRIGGERER_CONNECTIONS:
            raise checks.CheckFailed(
                f"the triggerer held {max(held)} connections to the store while idle "
                f"(at most {TRIGGERER_CONNECTIONS})"
            )
        return (
            f"{seconds:.0f}s with no items: 0 {DISPATCHER} runs; the triggerer (all of it) "
            f"used {cpu:.1f}s CPU and held {connections} store connection(s)"
        )

    def _floor(self) -> list[float]:
        """Seconds from each REST trigger of the one-task DAG to its task's start."""
        seconds = [self._floor_run() for _ in range(FLOOR_RUNS)]
        self.driver.say(f"{FLOOR}: {_describe(seconds)} from the trigger to the task's start")
        return seconds

    def _floor_run(self) -> float:
        driver, api = self.driver, self.driver.api
        requested = datetime.now(timezone.utc)
        run_id = driver.trigger(FLOOR, "floor")
        started = wait_for(
            lambda: _start_date(api.task_instances(FLOOR, run_id, task_id=FLOOR_TASK)),
            timeout=120,
            what=f"the task of {FLOOR} {run_id} to start",
            interval=0.2,
            check=driver.deployment.check_alive,
        )
        wait_for(
            lambda: api.run(FLOOR, run_id)["state"] in TERMINAL_RUN_STATES,
            timeout=120,
            what=f"{FLOOR} {run_id} to finish",
            interval=0.5,
            check=driver.deployment.check_alive,
        )
        return float((started - requested).total_seconds())

    def _produce(self, store: AtomicStore) -> dict[str, str]:
        """Enqueue the items at random moments; ``{key: enqueuedAt}``."""
        say, rng = self.driver.say, random.Random(SEED)
        say(f"enqueueing {EVENT_ITEMS} items into {TABLE}, about {MEAN_GAP_SECONDS}s apart")
        enqueued = {}
        for n in range(EVENT_ITEMS):
            time.sleep(rng.expovariate(1.0 / MEAN_GAP_SECONDS))
            key, stamp = f"evt-{n:04d}", timestamps.now()
            result = store.atomic_upsert(
                TABLE,
                key,
                insert_value={"status": "pending", "payload": {"item": n}, "enqueuedAt": stamp},
            )
            if not result["inserted"]:
                raise checks.CheckFailed(f"{TABLE} already held {key}")
            enqueued[key] = stamp
        wait_for(
            lambda: checks.status_counts(checks.read_table(store, TABLE))["done"] == EVENT_ITEMS,
            timeout=DRAIN_TIMEOUT,
            what=f"{DISPATCHER} runs to process all {EVENT_ITEMS} items",
            interval=1,
            check=self.driver.deployment.check_alive,
        )
        wait_for(
            lambda: not self.driver.open_runs()[DISPATCHER],
            timeout=300,
            what=f"every {DISPATCHER} run to finish",
            interval=2,
            check=self.driver.deployment.check_alive,
        )
        return enqueued

    def _verify(
        self, store: AtomicStore, enqueued: dict[str, str], floor: list[float]
    ) -> dict[str, str]:
        """Exactly-once, then the latency and run-count figures."""
        api = self.driver.api
        items = checks.read_table(store, TABLE)
        effects = checks.read_table(store, EFFECTS_TABLE)
        checks.every_item_done_with_one_effect(items, effects, expected=EVENT_ITEMS)
        runs = {run["dag_run_id"]: run for run in api.runs(DISPATCHER)}
        failed = {run_id: run["state"] for run_id, run in runs.items() if run["state"] != "success"}
        if failed:
            raise checks.CheckFailed(f"runs of {DISPATCHER} did not succeed: {failed}")
        claims: dict[str, list[str]] = {}
        for run_id in runs:
            result = api.xcom(DISPATCHER, run_id, CLAIM_TASK)
            if not isinstance(result, dict):
                raise checks.CheckFailed(f"{CLAIM_TASK} of {DISPATCHER} {run_id} returned no claim")
            claims[run_id] = [row["key"] for row in result["claimed"]]
        tasks: Counter[str] = Counter(
            ti["dag_run_id"]
            for ti in api.task_instances(DISPATCHER, task_id=PROCESS_TASK)
            if ti["map_index"] >= 0
        )
        claim_count = checks.every_claim_accounted_for(items, claims, tasks)
        if claim_count != EVENT_ITEMS:  # no recovery runs here: each item claimed once
            raise checks.CheckFailed(f"{claim_count} claims for {EVENT_ITEMS} items")

        latency = [
            (
                timestamps.parse_timestamp(items[key]["claimedAt"])
                - timestamps.parse_timestamp(stamp)
            ).total_seconds()
            for key, stamp in enqueued.items()
        ]
        empty = sum(1 for keys in claims.values() if not keys)
        p50, p95 = (_percentile(latency, q) - _percentile(floor, q) for q in (50, 95))
        return {
            "event latency": (
                f"{_describe(latency)} (enqueue → claimed, {len(latency)} items); over the "
                f"floor: p50 +{p50:.2f}s (target 1 s), p95 +{p95:.2f}s (target 3 s)"
            ),
            "event runs": (
                f"{len(runs)} {DISPATCHER} runs for {EVENT_ITEMS} items, {empty} claimed "
                f"nothing; every item processed once ({claim_count} claims)"
            ),
            "event scheduled": self._scheduled_figure(),
        }

    def _scheduled_figure(self) -> str:
        """The scheduled recipe's average wait, from its DAG's schedule."""
        dag = self.driver.api.dag(SCHEDULED) or {}
        summary = str(dag.get("timetable_summary") or "unknown")
        interval = _interval_seconds(summary)
        if interval is None:
            return f"{SCHEDULED} ({summary}): half its interval on average"
        return f"{SCHEDULED} (every {summary}): {interval / 2:.0f}s on average (half its interval)"

    # -- what the triggerer holds and uses ----------------------------------------------------

    def _triggerer(self) -> list[psutil.Process]:
        component = self.driver.deployment.components["triggerer"]
        return list(processes_in_sessions({component.pid}))

    def _triggerer_cpu(self) -> float:
        return self.driver.deployment.cpu_seconds()["triggerer"]

    def _connections_while_waiting(self) -> int:
        """The triggerer's store connections between counts: the fewest of a few looks.

        A watch's compilation (a catalog read) opens the store's connection for a few
        milliseconds; a look that lands on one sees it. A triggerer that kept it open
        would show it every time.
        """
        looks = []
        for _ in range(3):
            looks.append(self._trigger_connections())
            time.sleep(0.3)
        return min(looks)

    def _trigger_connections(self) -> int:
        """The triggerer's open connections to the store's database (not Airflow's)."""
        deployment = self.driver.deployment
        server = deployment.server
        assert server is not None
        ports: set[int] = set()
        for process in self._triggerer():
            try:
                sockets = process.net_connections(kind="tcp")
            except psutil.Error:
                continue
            ports.update(s.laddr.port for s in sockets if s.raddr and s.raddr.port == server.port)
        if not ports:
            return 0
        with psycopg.connect(deployment.store_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND client_port = ANY(%s)",
                (STORE_DATABASE, sorted(ports)),
            ).fetchone()
        return int(row[0]) if row else 0


def _start_date(task_instances: list[dict[str, Any]]) -> datetime | None:
    for ti in task_instances:
        if ti.get("start_date"):
            return checks.parse_time(ti["start_date"])
    return None


def _percentile(samples: list[float], q: float) -> float:
    if len(samples) < 2:
        return samples[0] if samples else math.nan
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


def _describe(samples: list[float]) -> str:
    return (
        f"p50 {_percentile(samples, 50):.2f}s, p95 {_percentile(samples, 95):.2f}s, "
        f"max {max(samples):.2f}s"
    )


def _interval_seconds(summary: str) -> float | None:
    """``"0:05:00"`` (a timedelta schedule as the REST API shows it) in seconds."""
    match = re.fullmatch(r"(?:(\d+) days?, )?(\d+):(\d\d):(\d\d)", summary)
    if match is None:
        return None
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds
