"""The end-to-end scenario over the example DAGs: what is triggered, killed, waited for.

Everything overlaps on purpose, as in production:

1. the claim index is created (the deployment step ``docs/deploying.md`` asks for)
   and the DAGs are unpaused;
2. ``queue_producer`` enqueues ``Options.items`` items; once they are in,
   ``cross_run_counter`` is triggered ``COUNTER_RUNS`` times at once, and
   ``queue_dispatcher`` runs are triggered and kept topped up to
   ``DISPATCHER_BACKLOG`` open runs (more than its ``max_active_runs`` of 4, so
   several always run at once) while rows are pending;
   ``leader_lease`` is triggered in waves, so that several runs contend each time
   and the lease changes hands between waves;
3. ``e2e_claim_retry`` (the harness's own DAG, ``e2e/claim_retry.py``) claims a
   batch once; its claim task is SIGKILLed right after the claim committed, and
   Airflow's retry must get the same batch back (``replayed: true``);
4. ``stale_claim_recovery`` runs alongside, every ``STALE_EVERY`` seconds, with a
   threshold (``STALE_ALONGSIDE_SECONDS``) that healthy claims rarely reach -- and
   if one does, taking it over is still safe, which the checks prove;
5. once the drain is under way, one dispatcher run with a slow batch is
   triggered and one of its ``process`` tasks is SIGKILLed (its task process,
   found by its title) while its row is ``in_flight``: a stale claim, which
   ``e2e/browser.py`` then finds on the Airflow UI page in headless Chromium
   (unless ``Options.browser`` is off);
6. after the drain, recovery passes (threshold ``0``: every dispatcher run has
   finished, so whatever is still ``in_flight`` is stale) until nothing is
   ``in_flight``;
7. every run must end; then ``verify`` checks the store and the task instances;
8. after the event-driven phase, six runs of two DAGs share a 2-slot semaphore
   (``e2e/semaphore_phase.py``): at most two hold it at once, the others wait
   ``deferred`` in the triggerer.

Timing varies from run to run; what is asserted does not. Every wait is on a
condition, with a generous time-out; the overall limit is ``python -m e2e``'s.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from airflow_atomic_store import AtomicStore
from e2e import browser, celery_hosts, checks, event_dispatch, semaphore_phase
from e2e.api import TERMINAL_RUN_STATES, AirflowApi, wait_for
from e2e.claim_retry import DAG_ID as CLAIM_RETRY
from e2e.claim_retry import ClaimRetry
from e2e.deployment import USERNAME, VIEWER, Deployment
from e2e.driver import Driver as PhaseDriver
from e2e.driver import Options
from e2e.tasks import task_process

# The example DAGs (example_dags/) and the tables they use, with their default params.
PRODUCER = "queue_producer"
DISPATCHER = "queue_dispatcher"
PROCESS_TASK = "process"  # the per-row mapped task, in the dispatcher and the recovery DAG
STALE = "stale_claim_recovery"
COUNTER = "cross_run_counter"
LEASE = "leader_lease"
DAG_IDS = (PRODUCER, DISPATCHER, STALE, COUNTER, LEASE, CLAIM_RETRY)  # the last: e2e/scenario_dags
#: Every DAG the run needs parsed: the event-driven phase's too (e2e/event_dispatch.py).
ALL_DAG_IDS = DAG_IDS + event_dispatch.DAG_IDS + semaphore_phase.DAG_IDS
CLAIM_TASK = {DISPATCHER: "drain", STALE: "reclaim"}
QUEUE_TABLE = "pending_ops"
EFFECTS_TABLE = "pending_ops_effects"
COUNTER_TABLE, COUNTER_KEY = "counters", "runs"
LEASE_LOG_TABLE = "lease_log"

BATCH_SIZE = 20  # items per dispatcher claim
DISPATCHER_BACKLOG = 6  # dispatcher runs kept queued or running (max_active_runs is 4)
VICTIM_AFTER_DONE = 40  # trigger the slow batch to kill once this many items are done
# Slow enough to be caught mid-batch; no hand-back teardown, so the killed task's row
# stays a stale claim for the UI page and the recovery passes to find.
VICTIM_CONF = {"batch_size": 5, "work_seconds": 20.0, "hand_back": False}
COUNTER_RUNS = 50
LEASE_WAVES, LEASE_RUNS_PER_WAVE, LEASE_WAVE_EVERY = 3, 3, 60.0
# The lease's default 60 s lifetime can run out between a starved run's acquire and its
# work; a holder that loses its lease rightly fails. The harness's runs ask for longer.
LEASE_CONF = {"ttl_seconds": 300}
STALE_EVERY = 90.0  # seconds between recovery runs alongside the dispatchers
STALE_ALONGSIDE_SECONDS = 300  # their threshold
# By age alone: asked of Airflow, they would take the killed task's row as soon as its
# run ended, before the UI page shows it stale; the final passes reclaim everything.
STALE_ALONGSIDE_CONF = {"stale_after_seconds": STALE_ALONGSIDE_SECONDS, "reclaim_dead_runs": False}
RECOVERY_PASSES = 5
DRAIN_TIMEOUT = 1500.0  # in practice, python -m e2e's overall --time-limit ends it first
POLL_SECONDS = 3.0  # each poll costs the API server a few requests: not too often
DEFAULT_OPTIONS = Options()


@dataclass
class Kill:
    """The dispatcher task process that was SIGKILLed, and the row it left in flight."""

    run_id: str
    ti_id: str
    row: str
    pid: int
    batch_in_flight: int


@dataclass
class Progress:
    victim: str | None = None
    kill: Kill | None = None
    recovery_passes: int = 0
    lease_waves: int = 0
    lease_runs_lost: list[str] = field(default_factory=list)
    last_lease_wave: float = 0.0
    last_stale: float = 0.0
    retry: ClaimRetry = field(default_factory=ClaimRetry)
    browser: dict[str, str] = field(default_factory=dict)  # e2e/browser.py's summary line


class Driver(PhaseDriver):
    """The phases' driver (``e2e/driver.py``), with the main scenario's progress."""

    def __init__(
        self,
        api: AirflowApi,
        deployment: Deployment,
        say: Callable[[str], None],
        options: Options,
    ):
        super().__init__(api, deployment, say, options)
        self.progress = Progress()


def run(
    api: AirflowApi,
    deployment: Deployment,
    say: Callable[[str], None],
    options: Options = DEFAULT_OPTIONS,
) -> dict[str, Any]:
    driver = Driver(api, deployment, say, options)
    items = options.items
    started = time.monotonic()
    with AtomicStore(deployment.store_url) as store:
        say(
            f"claimable sets before the run (the schema makes the pending set): {store.claim_sets()}"
        )
        for dag_id in DAG_IDS:
            api.unpause(dag_id)
        driver.progress.retry.start(driver, store)
        driver.trigger(PRODUCER, "produce", {"count": items})
        events = event_dispatch.EventDispatch(driver) if options.events else None
        if events is not None:  # its queue stays idle from here until the main drain is over
            events.arm()
        # The counter runs start once the items are in: queued beside the producer, their
        # hundred task instances (and their higher priority weights) kept its one task
        # waiting for minutes under the CeleryExecutor.
        wait_for(
            lambda: checks.status_counts(checks.read_table(store, QUEUE_TABLE))["pending"] > 0,
            timeout=300,
            what=f"{PRODUCER} to enqueue its items",
            interval=POLL_SECONDS,
            check=deployment.check_alive,
        )
        for _ in range(COUNTER_RUNS):
            driver.trigger(COUNTER, "count")
        say(f"{PRODUCER} enqueued {items} items; triggered {COUNTER_RUNS} {COUNTER} runs")

        drain(driver, store)
        recover(driver, store)

        say("waiting for every run to finish")
        wait_for(
            driver.all_finished,
            timeout=300,
            what="every run of every DAG to finish",
            interval=3,
            check=deployment.check_alive,
        )
        summary = verify(driver, store, time.monotonic() - started)
        progress = driver.progress
        summary.update(  # which worker ran which task
            celery_hosts.verify(
                driver,
                DAG_IDS,
                killed_task=progress.kill.ti_id if progress.kill else None,
                retried_claim_run=progress.retry.kill.run_id if progress.retry.kill else None,
            )
        )
        if events is not None:
            summary.update(events.run(store, options.idle_seconds))
        if options.semaphore:
            summary.update(semaphore_phase.run(driver, store))
        return summary


# -- the drain, with everything else alongside ------------------------------------------------


def drain(driver: Driver, store: AtomicStore) -> None:
    """Keep dispatcher runs coming until the queue is empty; kill one task mid-batch."""
    progress, say = driver.progress, driver.say
    deadline = time.monotonic() + DRAIN_TIMEOUT
    last_report = 0.0
    while True:
        driver.deployment.check_alive()
        now = time.monotonic()
        items = checks.read_table(store, QUEUE_TABLE)
        statuses = checks.status_counts(items)
        open_runs = driver.open_runs()
        producing = open_runs[PRODUCER] > 0  # the one run triggered above (no schedule)
        dispatchers_open = open_runs[DISPATCHER]
        if now - last_report >= 15:
            say(f"queue {dict(sorted(statuses.items()))}; open dispatcher runs {dispatchers_open}")
            last_report = now

        work_left = producing or statuses["pending"] > 0
        victim_after = min(VICTIM_AFTER_DONE, driver.options.items // 10)
        if progress.victim is None and (statuses["done"] >= victim_after or not work_left):
            progress.victim = driver.trigger(DISPATCHER, "victim", VICTIM_CONF)
            say(f"triggered {progress.victim}: a slow batch, to be killed mid-batch")
        if progress.victim is not None and progress.kill is None:
            progress.kill = kill_mid_batch(driver, store, progress.victim)
            if progress.kill is None:
                progress.victim = victim_still_to_kill(driver, progress.victim, statuses)
        # No new dispatchers while the victim waits for its batch: under Celery the ones
        # triggered before it could drain the queue first, and it then claimed nothing.
        victim_waiting = progress.victim is not None and progress.kill is None
        if statuses["pending"] > 0 and not victim_waiting:  # an empty queue's only takes a slot
            for _ in range(DISPATCHER_BACKLOG - dispatchers_open):
                driver.trigger(DISPATCHER, "dispatch", {"batch_size": BATCH_SIZE})
        browse = driver.options.browser and not progress.browser
        if progress.kill is not None and browse and not producing:
            progress.browser = check_page_in_browser(driver, store, progress.kill)
        retry_killed = progress.retry.kill_after_commit(driver, store)
        lease_wave(driver, now)
        if now - progress.last_stale >= STALE_EVERY and open_runs[STALE] == 0:
            driver.trigger(STALE, "alongside", STALE_ALONGSIDE_CONF)
            progress.last_stale = now

        everything_started = (
            progress.kill is not None and progress.lease_waves == LEASE_WAVES and retry_killed
        )
        if not work_left and dispatchers_open == 0 and everything_started:
            say(f"queue drained: {dict(sorted(statuses.items()))}")
            return
        if now > deadline:
            raise TimeoutError(
                f"the drain did not finish in {DRAIN_TIMEOUT:.0f}s: queue {dict(statuses)}, "
                f"{dispatchers_open} dispatcher runs open, killed: {progress.kill}"
            )
        time.sleep(POLL_SECONDS)


def lease_wave(driver: Driver, now: float) -> None:
    """Trigger the next wave of contending lease runs, when it is due."""
    progress = driver.progress
    if progress.lease_waves >= LEASE_WAVES or now - progress.last_lease_wave < LEASE_WAVE_EVERY:
        return
    for _ in range(LEASE_RUNS_PER_WAVE):
        driver.trigger(LEASE, "lease", LEASE_CONF)
    progress.lease_waves += 1
    progress.last_lease_wave = now


def claimed_keys(api: AirflowApi, dag_id: str, run_id: str) -> list[str] | None:
    """The keys a run's claim returned, in order (its mapped tasks' order), or None yet."""
    result = api.xcom(dag_id, run_id, CLAIM_TASK[dag_id])
    if not isinstance(result, dict):
        return None
    return [row["key"] for row in result["claimed"]]


def victim_still_to_kill(driver: Driver, victim: str, statuses: Counter[str]) -> str | None:
    """``victim``, or None (trigger another) when it ended before it could be killed.

    It claims nothing when other dispatchers emptied the queue before it started; a
    queue with nothing pending left for another victim ends the e2e at once.
    """
    state = driver.states(DISPATCHER).get(victim)
    if state not in TERMINAL_RUN_STATES:
        return victim
    if statuses["pending"] == 0:
        raise RuntimeError(
            f"{victim} ended ({state}) before a task of it could be killed mid-batch, and "
            "no item is left pending for another"
        )
    driver.say(f"{victim} ended ({state}) before it could be killed; triggering another")
    return None


def kill_mid_batch(driver: Driver, store: AtomicStore, victim: str) -> Kill | None:
    """SIGKILL one running ``process`` task of ``victim`` while it holds its row in flight.

    Returns None (try again at the next poll) until a task was killed with its row
    still in flight afterwards: a stale claim.
    """
    running = driver.api.task_instances(DISPATCHER, victim, task_id=PROCESS_TASK, state="running")
    if not running:
        return None
    keys = claimed_keys(driver.api, DISPATCHER, victim) or []
    claimed_by = f"{DISPATCHER}/{victim}"

    def held(key: str | None) -> bool:
        value = store.get(QUEUE_TABLE, key) if key else None
        if value is None:
            return False
        return value.get("status") == "in_flight" and value.get("claimedBy") == claimed_by

    candidates = driver.deployment.task_candidates()
    for ti in running:
        index = ti["map_index"]
        row = keys[index] if 0 <= index < len(keys) else None
        process = task_process(ti["id"], candidates)
        if process is None or not held(row):
            continue
        process.send_signal(signal.SIGKILL)
        psutil.wait_procs([process], timeout=10)
        if not held(row):  # it finished the row just before it died: not a stale claim
            driver.say(f"killed {PROCESS_TASK}[{index}] of {victim} too late; trying another")
            continue
        in_flight = sum(held(key) for key in keys)
        kill = Kill(victim, ti["id"], str(row), process.pid, in_flight)
        driver.say(
            f"SIGKILLed task process {kill.pid} ({PROCESS_TASK}[{index}] of {victim}, row "
            f"{row}) while its run held {in_flight} of {len(keys)} rows in flight"
        )
        return kill
    return None


def check_page_in_browser(driver: Driver, store: AtomicStore, kill: Kill) -> dict[str, str]:
    """The Airflow UI page in headless Chromium, while the killed task's claim is stale;
    then the native page and the victim's claim task's tab, rendered by Airflow's UI."""
    deployment = driver.deployment
    shots = driver.options.screenshot
    page = browser.check_queue_page(
        base_url=deployment.api_url,
        username=USERNAME,
        password=deployment.password,
        store=store,
        table=QUEUE_TABLE,
        stale_key=kill.row,
        claimed_by=f"{DISPATCHER}/{kill.run_id}",
        work_dir=deployment.root,
        say=driver.say,
        screenshot=shots,
    )
    victim = browser.DispatcherTask(
        DISPATCHER,
        kill.run_id,
        CLAIM_TASK[DISPATCHER],
        tuple(claimed_keys(driver.api, DISPATCHER, kill.run_id) or ()),
    )
    return page | browser.check_native_pages(
        base_url=deployment.api_url,
        username=USERNAME,
        password=deployment.password,
        viewer=VIEWER,
        viewer_password=deployment.viewer_password,
        store=store,
        table=QUEUE_TABLE,
        dispatcher=victim,
        work_dir=deployment.root,
        say=driver.say,
        screenshots=shots.parent if shots else None,
    )


def recover(driver: Driver, store: AtomicStore) -> None:
    """Trigger recovery passes until no item is in flight."""
    progress, say = driver.progress, driver.say
    in_flight: list[str] = []
    for attempt in range(RECOVERY_PASSES + 1):
        wait_for(
            lambda: not ({STALE, DISPATCHER} & set(driver.open_runs())),
            timeout=300,
            what="the dispatcher and stale-claim runs to finish",
            interval=2,
            check=driver.deployment.check_alive,
        )
        items = checks.read_table(store, QUEUE_TABLE)
        in_flight = sorted(k for k, v in items.items() if v.get("status") == "in_flight")
        if not in_flight:
            say(f"nothing in flight after {progress.recovery_passes} final recovery pass(es)")
            return
        if attempt == RECOVERY_PASSES:
            break
        say(f"{len(in_flight)} item(s) in flight {in_flight[:5]}: recovery pass {attempt + 1}")
        driver.trigger(STALE, "recover", {"stale_after_seconds": 0})
        progress.recovery_passes += 1
    raise checks.CheckFailed(f"still in flight after {RECOVERY_PASSES} passes: {in_flight[:10]}")


# -- the checks ----------------------------------------------------------------------------------


def verify(driver: Driver, store: AtomicStore, seconds: float) -> dict[str, Any]:
    """Assert every guarantee; return the summary."""
    progress, api = driver.progress, driver.api
    kill = progress.kill
    assert kill is not None  # drain() returns only after the kill
    states = {dag_id: driver.states(dag_id) for dag_id in DAG_IDS}
    for dag_id, runs in states.items():
        # A scheduled run (the dispatcher's every 5 minutes...) may have started after
        # everything finished: with the queue empty it has nothing to claim. Leave it out.
        mine = set(driver.triggered.get(dag_id, []))
        for run_id in [r for r, state in runs.items() if state not in TERMINAL_RUN_STATES]:
            if run_id in mine:
                raise checks.CheckFailed(f"{dag_id} {run_id} is still {runs[run_id]}")
            del runs[run_id]
        expected_failure = kill.run_id if dag_id == DISPATCHER else None
        failed = {
            run_id: state
            for run_id, state in runs.items()
            if state != "success" and run_id != expected_failure
        }
        if dag_id == LEASE:  # the scheduler's own runs, with the default lifetime, may lose it
            lost_runs = {run_id for run_id in failed if run_id not in mine}
            progress.lease_runs_lost = sorted(lost_runs)
            failed = {run_id: state for run_id, state in failed.items() if run_id not in lost_runs}
        if failed:
            raise checks.CheckFailed(f"runs of {dag_id} did not succeed: {failed}")
    if states[DISPATCHER][kill.run_id] != "failed":
        raise checks.CheckFailed(f"{kill.run_id}, whose task was killed, did not fail")

    items = checks.read_table(store, QUEUE_TABLE)
    effects = checks.read_table(store, EFFECTS_TABLE)
    checks.every_item_done_with_one_effect(items, effects, expected=driver.options.items)
    claims: dict[str, list[str]] = {}
    tasks: Counter[str] = Counter()
    for dag_id, claim_task in CLAIM_TASK.items():
        for run_id in states[dag_id]:
            keys = claimed_keys(api, dag_id, run_id)
            if keys is None:
                raise checks.CheckFailed(f"{claim_task} of {dag_id} {run_id} returned no claim")
            claims[f"{dag_id}/{run_id}"] = keys
        for ti in api.task_instances(dag_id, task_id=PROCESS_TASK):
            if ti["map_index"] >= 0:  # an empty claim maps to one skipped, unmapped task
                tasks[f"{dag_id}/{ti['dag_run_id']}"] += 1
    claim_count = checks.every_claim_accounted_for(items, claims, tasks)
    if not items[kill.row].get("recoveries"):
        raise checks.CheckFailed(f"the killed task's row {kill.row} was never recovered")

    # The runs really overlapped: several of each ran at the same instant.
    at_once = {}
    for dag_id in (DISPATCHER, COUNTER):
        spans = [
            (run["start_date"], run["end_date"])
            for run in api.runs(dag_id)
            if run["dag_run_id"] in states[dag_id] and run["start_date"] and run["end_date"]
        ]
        at_once[dag_id] = checks.most_at_once(spans)
        if at_once[dag_id] < 2:
            raise checks.CheckFailed(f"runs of {dag_id} never overlapped")

    counter = (store.get(COUNTER_TABLE, COUNTER_KEY) or {}).get("count")
    if counter != COUNTER_RUNS:
        raise checks.CheckFailed(f"the counter is {counter!r} after {COUNTER_RUNS} runs")
    log = checks.read_table(store, LEASE_LOG_TABLE)
    holders = checks.lease_intervals_never_overlap(
        (key, value.get("start"), value.get("end")) for key, value in log.items()
    )

    replay = progress.retry.verify(driver, store)

    lost = ", ".join(progress.lease_runs_lost)
    recovered = {k: v["recoveries"] for k, v in items.items() if v.get("recoveries")}
    return {
        "items": f"{len(items)} done, each side effect once, none in flight",
        "claims": f"{claim_count}, none handed out twice",
        "runs": ", ".join(f"{dag_id} {len(runs)}" for dag_id, runs in states.items()),
        "at once": ", ".join(f"up to {n} {dag_id} runs" for dag_id, n in at_once.items()),
        "killed": f"{PROCESS_TASK} of {kill.run_id} for {kill.row}",
        "recoveries": (
            f"{len(recovered)} item(s) re-claimed {sum(recovered.values())} time(s), "
            f"{progress.recovery_passes} final pass(es)"
        ),
        **replay,
        **progress.browser,
        "counter": counter,
        "lease": f"{holders} holding interval(s), none overlapping"
        + (f"; scheduled run(s) that lost the lease: {lost}" if lost else ""),
        "scenario": f"{seconds:.0f}s",
    }
