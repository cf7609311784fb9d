"""A PostgreSQL failover under load: a synchronous standby promoted mid-stream.

The store runs on the multi-host URL ``postgresql://…@127.0.0.1:P1,127.0.0.1:P2/db
?target_session_attrs=read-write`` (P1 the primary, behind a relay the test
controls; P2 its synchronous standby, devkit/standby.py). Four processes run
keyed increments and keyed claims, retrying an operation with the same key after
a ``StoreUnavailableError``; a fifth declares a claimable set whose build waits on
an open transaction. Then the replies to the store's connections are held (the
server still commits what it was sent: replies lost after the commit), the
primary is stopped ``-m immediate`` and the standby promoted. Afterwards nothing
is lost or doubled, every error was a ``StoreUnavailableError``, the calls whose
reply was lost replay their receipts on the new primary, and the interrupted
build leaves the store usable. Every call is in a JSON-lines history
(tests/reliability/failover_workers.py) for a linearizability checker.

Two shorter cases: what an *asynchronous* standby loses (an acknowledged write,
receipt included: its retry then applies once), and the Airflow hook on a
multi-host connection (URI and JSON forms) following the failover.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest

from airflow_atomic_store import AtomicStore, StoreUnavailableError
from devkit.processes import run_in_processes
from devkit.relay import TcpRelay
from devkit.standby import StandbyPair
from tests.reliability import failover_workers
from tests.reliability.failover_workers import PENDING
from tests.support.linearizability import (
    COUNTER,
    QUEUE_ROW,
    Call,
    check_calls,
    read_calls,
    translate,
)

pytestmark = pytest.mark.postgres

WORKERS = 4
QUEUE_ROWS = 800
JOB_ROWS = 200
STREAM_APP = "failover_worker"
BUILD_APP = "failover_builder"
#: Commits on the primary before the failover, and on the new primary after it.
PROGRESS = 40
#: Longest one attempt may take: a lost server is noticed, never waited for.
NO_HANG = 15.0
_LOCAL_COMMIT = "options=-csynchronous_commit%3Dlocal"  # seeding need not wait for the standby


@dataclass(frozen=True)
class FailoverRun:
    """What the scenario did and what the promoted standby holds afterwards.

    Before the workers started: ``counters/total`` was ``{"n": 0, "seen": {}}``, and
    ``queue`` (``q-00000``…) and ``jobs`` (``j-00000``…) held ``QUEUE_ROWS`` and
    ``JOB_ROWS`` rows ``{"status": "pending"}``; the history has every call after that.
    """

    history_dir: Path
    operations: list[dict[str, Any]]
    build: dict[str, Any]
    held_connections: int
    failover_began_ns: int
    counter: dict[str, Any]
    queue: dict[str, dict[str, Any]]
    jobs: dict[str, dict[str, Any]]

    def events(self) -> list[dict[str, Any]]:
        return [
            json.loads(line)
            for path in sorted(self.history_dir.glob("*.jsonl"))
            for line in path.read_text().splitlines()
        ]


def _fetch(server_url: str, statement: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(server_url, autocommit=True, connect_timeout=10) as conn:
        return conn.execute(statement.encode(), args).fetchall()


def _wait(condition: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _counter(url: str) -> int:
    rows = _fetch(url, "SELECT (value->>'n')::int FROM atomic_store_rows WHERE key = 'total'")
    return int(rows[0][0]) if rows else 0


def _drive_failover(
    pair: StandbyPair, front: TcpRelay, stop_file: Path, report: dict[str, Any]
) -> None:
    """Wait for load and a blocked build, hold replies, crash the primary, promote."""
    primary = pair.primary.url
    try:
        _wait(lambda: _counter(primary) >= PROGRESS, "increments on the primary")
        _wait(
            lambda: (
                _fetch(
                    primary,
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                    "AND query ILIKE 'CREATE INDEX CONCURRENTLY%%' AND wait_event_type = 'Lock'",
                    (BUILD_APP,),
                )[0][0]
                == 1
            ),
            "the claimable set's build to wait",
        )
        report["held"] = front.hold_replies()
        # Every statement sent reaches the server; once none is running, each has committed
        # (and the synchronous standby has flushed it) but its reply is held.
        _wait(
            lambda: (
                _fetch(
                    primary,
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                    "AND state = 'active'",
                    (STREAM_APP,),
                )[0][0]
                == 0
            ),
            "the held statements to commit",
            timeout=10,
        )
        before = _counter(primary)
        report["began"] = time.monotonic_ns()
        pair.primary.shutdown("immediate")
        front.cut()
        pair.standby.promote()
        report["promoted"] = time.monotonic_ns()
        _wait(lambda: _counter(pair.standby.url) >= before + PROGRESS, "increments after it")
    except BaseException as exc:  # reported by the test once the workers stop
        report["error"] = repr(exc)
    finally:
        stop_file.touch()


def _port(pair: StandbyPair) -> int:
    assert pair.primary.port is not None
    return pair.primary.port


def _seed(url: str) -> None:
    with AtomicStore(url) as store:
        store.put("counters", "total", {"n": 0, "seen": {}})
        for i in range(QUEUE_ROWS):
            store.put("queue", f"q-{i:05d}", {"status": "pending"})
        for i in range(JOB_ROWS):
            store.put("jobs", f"j-{i:05d}", {"status": "pending"})
        store.ensure_claim_index(table="queue", where=PENDING)


@pytest.fixture(scope="module")
def failover_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FailoverRun]:
    base = tmp_path_factory.mktemp("failover")
    history_dir, stop_file = base / "history", base / "stop"
    with StandbyPair(synchronous=True) as pair, TcpRelay(target_port=_port(pair)) as front:
        _seed(f"{pair.primary.url}?{_LOCAL_COMMIT}")
        pair.wait_replayed()
        stream_url = pair.url(
            primary_port=front.port, connect_timeout=5, application_name=STREAM_APP
        )
        build_url = pair.url(primary_port=front.port, connect_timeout=5, application_name=BUILD_APP)
        deadline = time.monotonic() + 45
        report: dict[str, Any] = {}
        driver = threading.Thread(
            target=_drive_failover, args=(pair, front, stop_file, report), daemon=True
        )
        # An open transaction that has written to the rows table: CREATE INDEX
        # CONCURRENTLY waits for it, so the build is in progress at the failover.
        blocker = psycopg.connect(pair.primary.url, connect_timeout=10)
        blocker.execute("LOCK TABLE atomic_store_rows IN ROW EXCLUSIVE MODE")
        driver.start()
        try:
            results = run_in_processes(
                failover_workers.run_role,
                [
                    ("stream", stream_url, f"w{w}", str(history_dir), str(stop_file), deadline)
                    for w in range(WORKERS)
                ]
                + [("build", build_url, "builder", str(history_dir), deadline)],
                timeout=90,
            )
        finally:
            stop_file.touch()
            driver.join(timeout=60)
            blocker.close()
        assert "error" not in report, report
        with AtomicStore(pair.standby.url) as store:
            counter = store.get("counters", "total")
            assert counter is not None
            queue = {row["key"]: row["value"] for row in store.query("queue", limit=10_000)}
            jobs = {row["key"]: row["value"] for row in store.query("jobs", limit=10_000)}
        yield FailoverRun(
            history_dir=history_dir,
            operations=[op for ops in results[:WORKERS] for op in ops],
            build=results[WORKERS],
            held_connections=report["held"],
            failover_began_ns=report["began"],
            counter=counter,
            queue=queue,
            jobs=jobs,
        )


def _of(run: FailoverRun, method: str) -> list[dict[str, Any]]:
    return [op for op in run.operations if op["method"] == method]


def test_failover_loses_and_doubles_no_keyed_increment(failover_run: FailoverRun) -> None:
    increments = _of(failover_run, "atomic_update")
    assert all(op["result"] is not None for op in increments), "an increment never succeeded"
    seen = set(failover_run.counter["seen"])
    assert seen == {op["key"] for op in increments}, "an increment was lost, or nobody made it"
    assert failover_run.counter["n"] == len(increments), "an increment applied twice"
    # Each increment returned the count its own commit made, replayed or not: 1..N, once each.
    returned = sorted(op["result"]["value"]["n"] for op in increments)
    assert returned == list(range(1, len(increments) + 1))


def test_failover_hands_no_row_to_two_keyed_claims_and_loses_no_claim(
    failover_run: FailoverRun,
) -> None:
    claims = _of(failover_run, "atomic_claim")
    assert all(op["result"] is not None for op in claims), "a claim never succeeded"
    returned = Counter(row["key"] for op in claims for row in op["result"]["claimed"])
    assert all(times == 1 for times in returned.values()), "a row was returned to two claims"
    for op in claims:
        keys = {row["key"] for row in op["result"]["claimed"]}
        marked = {k for k, v in failover_run.queue.items() if v.get("claimedBy") == op["key"]}
        assert keys == marked, (op["key"], keys, marked)  # nothing claimed twice, none lost
    for key, value in failover_run.queue.items():
        assert (value["status"] == "in_flight") == (key in returned), (key, value)
    assert sum(returned.values()) > 2 * WORKERS, "the claims took almost nothing: a weak test"


def test_every_error_in_a_failover_is_store_unavailable_and_the_outage_is_short(
    failover_run: FailoverRun,
) -> None:
    operations = [*failover_run.operations, *failover_run.build.values()]
    errors = [e for op in operations if isinstance(op, dict) for e in op.get("attempts", ())]
    assert errors, "nothing was interrupted: the test proves nothing"
    assert all(error.startswith("StoreUnavailableError: ") for error in errors), errors
    events = failover_run.events()
    began = {(e["process"], e["seq"]): e["time"] for e in events if e["type"] == "invoke"}
    slowest = max(
        e["time"] - began[(e["process"], e["seq"])] for e in events if e["type"] != "invoke"
    )
    assert slowest < NO_HANG * 1e9, f"a call took {slowest / 1e9:.1f}s"
    back = min(
        e["time"]
        for e in events
        if e["type"] == "ok" and began[(e["process"], e["seq"])] > failover_run.failover_began_ns
    )
    outage = (back - failover_run.failover_began_ns) / 1e9
    print(f"failover: first success {outage:.2f}s after the primary's crash")
    assert outage < 10, f"the store came back only {outage:.1f}s after the failover"


def test_a_commit_whose_reply_was_lost_replays_its_receipt_on_the_new_primary(
    failover_run: FailoverRun,
) -> None:
    assert failover_run.held_connections == WORKERS + 1  # each process's one connection
    replayed = [op for op in failover_run.operations if op["result"].get("replayed")]
    # Replies were held on every connection; each worker's call then in flight had been
    # sent and committed, so most of them can only have completed by replaying.
    assert len(replayed) >= 1, "no reply lost after its commit was replayed"
    assert all(op["attempts"] for op in replayed), "a first attempt replayed a receipt"
    print(f"failover: {len(replayed)} calls replayed their receipt after losing their reply")


def test_an_index_build_interrupted_by_a_failover_leaves_the_store_usable(
    failover_run: FailoverRun,
) -> None:
    build = failover_run.build
    interrupted = build["interrupted"]
    assert interrupted["result"] is None
    assert interrupted["attempts"][0].startswith("StoreUnavailableError: ")
    # Listed (the catalog row committed before the build), not ready: claims go on without it.
    assert [s["state"] for s in build["sets_before"]] == ["building"]
    first = {row["key"] for row in build["unindexed"]["result"]["claimed"]}
    second = {row["key"] for row in build["indexed"]["result"]["claimed"]}
    assert len(first) == len(second) == 5 and not first & second
    assert [s["state"] for s in build["sets_after"]] == ["ready"]
    assert build["declared"]["result"] == build["sets_after"][0]["name"]
    for key, value in failover_run.jobs.items():
        owner = "jobs-1" if key in first else "jobs-2" if key in second else None
        assert value.get("claimedBy") == owner and (value["status"] == "pending") == (
            owner is None
        ), (key, value)


def test_the_history_records_every_attempt_with_its_outcome(failover_run: FailoverRun) -> None:
    events = failover_run.events()
    invoked = Counter((e["process"], e["seq"]) for e in events if e["type"] == "invoke")
    completed = Counter((e["process"], e["seq"]) for e in events if e["type"] != "invoke")
    assert invoked == completed and set(invoked.values()) == {1}
    attempts = sum(len(op["attempts"]) + 1 for op in failover_run.operations)
    assert (
        sum(1 for e in events if e["process"].startswith("w") and e["type"] == "invoke") == attempts
    )
    unknown = sum(1 for e in events if e["type"] == "unknown")
    assert unknown == sum(
        len(op.get("attempts", ()))
        for op in [*failover_run.operations, *failover_run.build.values()]
        if isinstance(op, dict)
    )
    assert {e["type"] for e in events} <= {"invoke", "ok", "unknown", "failed"}
    assert all(isinstance(e["time"], int) and e["time"] > 0 for e in events)


def test_the_failovers_history_is_linearizable(failover_run: FailoverRun) -> None:
    """Every attempt, checked (tests/support/linearizability) with the promoted standby's rows
    as reads after the last call: the counter, and the queue and jobs row by row."""
    calls = read_calls(sorted(failover_run.history_dir.glob("*.jsonl")))
    after = max(call.returned or call.invoked for call in calls) + 1
    end_state = [
        Call(
            "standby",
            0,
            "get",
            {"table": "counters", "key": "total"},
            after,
            after + 1,
            "ok",
            failover_run.counter,
        ),
        *(
            Call("standby", n, "get", {"table": table, "key": key}, after, after + 1, "ok", value)
            for table, rows in (("queue", failover_run.queue), ("jobs", failover_run.jobs))
            for n, (key, value) in enumerate(sorted(rows.items()), start=1)
        ),
    ]
    checks = [
        (COUNTER, partial(translate.counter, table="counters")),
        (QUEUE_ROW, partial(translate.queue, table="queue", pending=failover_run.queue)),
        (QUEUE_ROW, partial(translate.queue, table="jobs", pending=failover_run.jobs)),
    ]
    for model, translation in checks:
        checked = check_calls([*calls, *end_state], model, translation)
        print(checked.describe())
        assert checked.ok, checked.describe()


# -- an asynchronous standby; the Airflow hook on a multi-host connection -------------------------


def _increment(store: AtomicStore, key: str) -> dict[str, Any]:
    return store.atomic_update(
        "counters",
        "total",
        mutations=[{"field": "n", "operation": "increment", "value": 1}],
        idempotency_key=key,
    )


def test_an_asynchronous_standby_can_lose_an_acknowledged_write_and_its_receipt() -> None:
    # The relay between the servers stops the WAL from reaching the standby: an
    # asynchronous standby that lags at the moment of the crash.
    with StandbyPair(synchronous=False, replication_delay=0.0) as pair:
        assert pair.replication is not None
        with AtomicStore(pair.url(connect_timeout=5)) as store:
            store.put("counters", "total", {"n": 0})
            assert _increment(store, "before-the-lag") == {
                "updated": True,
                "value": {"n": 1},
                "key": "total",
                "replayed": False,
            }
            pair.wait_replayed()
            pair.replication.hold_replies()
            acknowledged = _increment(store, "lost")
            assert acknowledged["updated"] and acknowledged["value"] == {"n": 2}
            pair.fail_over()
            pair.replication.cut()
            with pytest.raises(StoreUnavailableError):
                store.get("counters", "total")
            # The acknowledged increment is gone, and its receipt with it ...
            assert store.get("counters", "total") == {"n": 1}
            # ... so its retry applies it, once; an earlier key still replays.
            assert _increment(store, "lost")["replayed"] is False
            assert _increment(store, "lost")["replayed"] is True
            assert _increment(store, "before-the-lag")["replayed"] is True
            assert store.get("counters", "total") == {"n": 2}


def test_the_hook_on_a_multi_host_connection_follows_a_failover_uri_and_json_forms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_atomic_store.hooks import AtomicStoreHook
    from airflow_atomic_store.hooks.atomic_store import postgres_connect_args

    with StandbyPair(synchronous=True) as pair:
        # The standby first: target_session_attrs makes libpq pass over it. Airflow's
        # connection has one port: the list goes in the "port" extra, which the Postgres
        # provider hands to libpq as it hands every extra (host and port lists pair up).
        ports = f"{pair.standby.port},{pair.primary.port}"
        extra = {"port": ports, "target_session_attrs": "read-write", "connect_timeout": "5"}
        forms = {
            "uri": "postgres://postgres@127.0.0.1,127.0.0.1/atomic_store?"
            + "&".join(f"{name}={value}" for name, value in extra.items()),
            "json": json.dumps(
                {
                    "conn_type": "postgres",
                    "host": "127.0.0.1,127.0.0.1",
                    "login": "postgres",
                    "schema": "atomic_store",
                    "extra": extra,
                }
            ),
        }
        hooks = {}
        for form, conn in forms.items():
            monkeypatch.setenv(f"AIRFLOW_CONN_FAILOVER_{form.upper()}", conn)
            hooks[form] = AtomicStoreHook(f"failover_{form}")
            # What the store (and a trigger's LISTEN connection) connects with.
            arguments = postgres_connect_args(f"failover_{form}", hooks[form]._connection())
            assert arguments is not None
            assert (arguments["host"], arguments["port"]) == ("127.0.0.1,127.0.0.1", ports)
            assert arguments["target_session_attrs"] == "read-write"
            hooks[form].put("t", f"{form}-written", {"on": "primary"})
        assert _fetch(pair.primary.url, "SELECT count(*) FROM atomic_store_rows") == [(2,)]
        pair.fail_over()
        for form, hook in hooks.items():
            with hook:
                with pytest.raises(StoreUnavailableError):
                    hook.get("t", f"{form}-written")
                assert hook.get("t", f"{form}-written") == {"on": "primary"}
                hook.put("t", f"{form}-after", {"on": "promoted standby"})
        assert _fetch(pair.standby.url, "SELECT count(*) FROM atomic_store_rows") == [(4,)]
