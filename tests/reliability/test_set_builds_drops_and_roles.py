"""Claimable-set builds on PostgreSQL against what a deployment does around them: a
drop of the set while it is being built, the store's own statement and lock timeouts,
and roles that may write the table but do not own it (PostgreSQL lets only the owner
create an index).

Each competitor is its own process with its own connection; an open write
transaction holds the ``CREATE INDEX CONCURRENTLY`` in its waits, so the overlap is
certain rather than a matter of timing.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from airflow_atomic_store import AtomicStore
from devkit.postgres_server import PostgresServer
from devkit.processes import run_in_processes
from tests.reliability import workers
from tests.support.physical import PHYSICAL_TABLE

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.parametrize("backend", ["postgres"], indirect=True),
]

PENDING = workers.PENDING


def _without_sets(store: AtomicStore) -> None:
    """Drop the schema's pending set, so that declaring it builds it again."""
    for listed in store.claim_sets():
        store.drop_claim_set(listed["name"])


def _queue_with_history(url: str) -> None:
    """One pending row (``job-0``) over 20,000 done ones, and no set yet."""
    with AtomicStore(url) as store:
        _without_sets(store)
        store.put("jobs", "job-0", {"status": "pending"})
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {PHYSICAL_TABLE} (table_id, key, value) SELECT "
            f"(SELECT id FROM {PHYSICAL_TABLE}_tables WHERE name = 'jobs'), 'done-' || i, "
            """'{"status": "done"}' FROM generate_series(1, 20000) AS i""".encode()
        )


def _set_indexes(url: str) -> list[tuple[str, bool]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index AS i JOIN pg_class AS c "
            "ON c.oid = i.indexrelid WHERE c.relname LIKE %s AND pg_table_is_visible(c.oid) "
            "ORDER BY 1",  # this store's schema only: other tests' stores have sets too
            (f"{PHYSICAL_TABLE}\\_set\\_%",),
        ).fetchall()


def _race(barrier: Any, role: str, url: str, how: str) -> Any:
    if role == "writer":
        return workers.hold_a_write_open(barrier, url, "job-0", 1.5)
    if role == "builder":
        return workers.build_set_by(barrier, url, how, {})
    return workers.drop_set_while_building(barrier, url)


@pytest.mark.parametrize("how", ["declare"])
def test_a_set_dropped_while_it_is_built_waits_for_the_build_then_goes(
    store_url: str, how: str
) -> None:
    """The drop used to deadlock with the build, or leave the builder without its set."""
    _queue_with_history(store_url)
    _, built, dropped = run_in_processes(
        _race,
        [("writer", store_url, how), ("builder", store_url, how), ("dropper", store_url, how)],
        timeout=120,
    )
    assert "error" not in built, built
    expected = ["job-0"] if how == "claim" else built["outcome"]
    assert built["outcome"] == expected
    assert dropped == {"state": "building", "dropped": True}
    assert _set_indexes(store_url) == []
    with AtomicStore(store_url) as store:
        assert store.claim_sets("jobs") == []
        left = [row["key"] for row in store.query("jobs", where=PENDING)]
    assert left == ([] if how == "claim" else ["job-0"])  # claimed once, or not at all


def _declare_behind_a_writer(barrier: Any, role: str, url: str) -> Any:
    if role == "writer":
        return workers.hold_a_write_open(barrier, url, "job-0", 2.0)
    options = {"statement_timeout": 0.5, "lock_timeout": 0.5}
    return workers.build_set_by(barrier, url, "declare", options)


def test_a_declared_build_waits_past_the_stores_own_timeouts(store_url: str) -> None:
    """``ensure_claim_index`` waits for its build however long it takes; the store's
    timeouts bound its primitives. It used to be cancelled after them, leaving an
    invalid index that writers kept maintaining."""
    _queue_with_history(store_url)
    _, declared = run_in_processes(
        _declare_behind_a_writer, [("writer", store_url), ("declare", store_url)], timeout=120
    )
    assert "error" not in declared, declared
    assert declared["seconds"] > 1.0  # it did wait for the writer
    assert _set_indexes(store_url) == [(declared["outcome"], True)]
    with AtomicStore(store_url, statement_timeout=0.5) as store:
        (listed,) = store.claim_sets("jobs")
        assert (listed["state"], listed["problem"]) == ("ready", None)
        assert store.count("jobs", where=PENDING) == 1
    assert declared["settings"] == ["500ms", "500ms"]  # its session's timeouts came back


def _drop_behind_a_declared_build(barrier: Any, role: str, url: str) -> Any:
    if role == "writer":
        return workers.hold_a_write_open(barrier, url, "job-0", 6.0)
    if role == "builder":
        return workers.build_set_by(barrier, url, "declare", {})
    with AtomicStore(url, statement_timeout=1.0) as store:
        store.get("jobs", "warm-up")
        barrier.wait(timeout=60)
        while not (listed := store.claim_sets()):
            time.sleep(0.01)
        started = time.monotonic()
        try:
            outcome: Any = store.drop_claim_set(listed[0]["name"])
        except Exception as exc:
            outcome = repr(exc)
        return {"outcome": outcome, "seconds": time.monotonic() - started}


def test_a_drop_behind_a_declared_build_ends_at_the_stores_statement_timeout(
    store_url: str,
) -> None:
    """Red-team finding: ``drop_claim_set`` waited for the build lock however long a
    declared build waited for an idle open transaction (14 s at a 3 s timeout). The wait
    is the store's statement like any other: it ends at the timeout, retryably."""
    _queue_with_history(store_url)
    _, built, dropped = run_in_processes(
        _drop_behind_a_declared_build,
        [("writer", store_url), ("builder", store_url), ("dropper", store_url)],
        timeout=120,
    )
    assert "StoreUnavailableError" in str(dropped["outcome"]), dropped
    assert "timeout (1 s) ran out" in dropped["outcome"]
    assert dropped["seconds"] < 3.0
    assert "error" not in built, built  # the build went on, and is listed ready
    with AtomicStore(store_url) as store:
        assert [s["state"] for s in store.claim_sets()] == ["ready"]


# -- the session's own timeouts, and a build that gave up --------------------------------


def _session_timeouts(store: AtomicStore) -> list[str]:
    with store._backend._cursor() as cursor:  # type: ignore[attr-defined]
        row = cursor.execute(
            "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
        ).fetchone()
    return list(row)


@pytest.mark.parametrize("how", ["declare"])
def test_a_build_gives_the_session_back_the_timeouts_its_role_set(
    store_url: str, postgres_server: PostgresServer, how: str
) -> None:
    """A store given no timeouts runs under those ``ALTER ROLE … SET`` (or the database,
    or ``options=-c``) gave its session; after a build they used to be 0 (none)."""
    role = store_url.split("//", 1)[1].split("@", 1)[0]
    postgres_server.execute(
        f"ALTER ROLE \"{role}\" SET statement_timeout = '3s'; "
        f"ALTER ROLE \"{role}\" SET lock_timeout = '2s'"
    )
    with AtomicStore(store_url) as store:
        _without_sets(store)
        store.put("jobs", "job-0", {"status": "pending"})
        assert _session_timeouts(store) == ["3s", "2s"]
        if how == "declare":
            store.ensure_claim_index(table="jobs", where=PENDING)
        else:
            assert store.atomic_claim("jobs", where=PENDING)["count"] == 1
        (listed,) = store.claim_sets("jobs")
        assert listed["state"] == "ready"
        assert _session_timeouts(store) == ["3s", "2s"]


# -- roles that do not own the table -------------------------------------------------------

_roles = itertools.count(1)


@pytest.fixture
def other_role(postgres_server: PostgresServer, store_url: str) -> Iterator[Any]:
    """``grant(privileges)`` -> the URL of a new login role granted them on the store's
    tables (the owner's schema as its search path); dropped afterwards."""
    owner = store_url.split("//", 1)[1].split("@", 1)[0]
    made: list[str] = []

    def grant(privileges: str) -> str:
        role = f"worker_{os.getpid()}_{next(_roles)}"
        postgres_server.execute(
            f'CREATE ROLE "{role}" LOGIN; ALTER ROLE "{role}" SET search_path = "{owner}"; '
            f'GRANT USAGE ON SCHEMA "{owner}" TO "{role}"; '
            f'GRANT {privileges} ON ALL TABLES IN SCHEMA "{owner}" TO "{role}"; '
            f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA "{owner}" TO "{role}"',
            dbname=postgres_server.dbname,
        )
        made.append(role)
        return store_url.replace(f"//{owner}@", f"//{role}@", 1)

    yield grant
    for role in made:
        postgres_server.execute(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"
        )
        postgres_server.execute(
            f'DROP OWNED BY "{role}"; DROP ROLE "{role}"', dbname=postgres_server.dbname
        )


#: A filter no schema creates a set for: declaring it builds an index.
QUEUED = [{"field": "status", "operator": "equals", "value": "queued"}]


def _as_writer(barrier: Any, url: str) -> dict[str, Any]:
    with AtomicStore(url) as store:
        first = [row["key"] for row in store.atomic_claim("jobs", where=PENDING)["claimed"]]
        plan = store.explain_claim("jobs", where=PENDING)
        try:
            declared: Any = store.ensure_claim_index(table="jobs", where=QUEUED)
        except Exception as exc:
            declared = repr(exc)
        return {"first": first, "plan": plan, "declared": declared, "sets": store.claim_sets()}


def test_a_role_that_may_write_but_not_own_claims_through_the_schemas_set_and_may_not_declare(
    store_url: str, other_role: Any
) -> None:
    """Workers under a role that cannot create indexes (docs/deploying.md's advice) claim
    through the set the schema made; declaring one is the owner's, and says so."""
    with AtomicStore(store_url) as store:
        for number in range(3):
            store.put("jobs", f"job-{number}", {"status": "pending"})
        (default,) = store.claim_sets()
    url = other_role("SELECT, INSERT, UPDATE, DELETE")
    (seen,) = run_in_processes(_as_writer, [(url,)], timeout=60)
    assert seen["first"] == ["job-0", "job-1", "job-2"]
    assert default["name"] in seen["plan"]
    assert "AccessDeniedError" in seen["declared"] and "owner" in seen["declared"]
    states = {s["name"]: (s["state"], s["problem"] or "") for s in seen["sets"]}
    assert states.pop(default["name"]) == ("ready", "")
    ((state, problem),) = states.values()  # listed as failed, with why
    assert state == "failed" and "must be owner" in problem
    assert [name for name, _ in _set_indexes(store_url)] == [default["name"]]  # none half-built


def test_a_member_of_the_owning_role_declares_a_set(
    store_url: str, other_role: Any, postgres_server: PostgresServer
) -> None:
    """PostgreSQL lets members of the table's owner role build indexes."""
    with AtomicStore(store_url) as store:
        for number in range(3):
            store.put("jobs", f"job-{number}", {"status": "pending"})
    url = other_role("SELECT, INSERT, UPDATE, DELETE")
    member = url.split("//", 1)[1].split("@", 1)[0]
    owner = store_url.split("//", 1)[1].split("@", 1)[0]
    postgres_server.execute(f'GRANT "{owner}" TO "{member}"', dbname=postgres_server.dbname)
    (seen,) = run_in_processes(_as_writer, [(url,)], timeout=60)
    assert seen["first"] == ["job-0", "job-1", "job-2"]
    (declared,) = [s for s in seen["sets"] if s["name"] == seen["declared"]]
    assert (declared["state"], declared["problem"]) == ("ready", None)
    assert [valid for _, valid in _set_indexes(store_url)] == [True, True]
