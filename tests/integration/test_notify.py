"""PostgreSQL: the store's writes notify their table's channel when (and only when) they commit."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql

from airflow_atomic_store import AtomicStore, SpecError
from airflow_atomic_store.store.notify import channel_for
from devkit.postgres_server import PostgresServer
from tests.support.specs import PENDING

pytestmark = pytest.mark.postgres


@pytest.fixture
def url(postgres_server: PostgresServer) -> Iterator[str]:
    name = "notify_case"
    url = postgres_server.create_user_schema(name)
    try:
        yield url
    finally:
        postgres_server.drop_user_schema(name)


@pytest.fixture
def listen(url: str) -> Iterator[Callable[[str], list[str]]]:
    """``listen(table)`` once, then call the result to collect what arrived since."""
    connection = psycopg.connect(url, autocommit=True)

    def start(table: str) -> Callable[[], list[str]]:
        channel = channel_for("atomic_store_rows", table)
        connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

        def arrived() -> list[str]:
            return [n.channel for n in connection.notifies(timeout=0.5, stop_after=50)]

        return arrived

    try:
        yield start  # type: ignore[misc]
    finally:
        connection.close()


def test_channel_is_a_short_identifier_per_storage_and_table() -> None:
    channel = channel_for("atomic_store_rows", "a table with spaces and ünïcode " * 20)
    assert len(channel.encode()) <= 63 and channel.isidentifier()
    assert channel != channel_for("other_rows", "jobs")
    assert channel_for("atomic_store_rows", "jobs") != channel_for("atomic_store_rows", "jobs2")


def test_put_update_and_upsert_notify_by_default(url: str, listen) -> None:
    arrived = listen("jobs")
    with AtomicStore(url) as store:
        store.put("jobs", "a", {"status": "pending"})
        assert len(arrived()) == 1
        store.atomic_update("jobs", "a", mutations=[{"field": "n", "operation": "set", "value": 1}])
        assert len(arrived()) == 1
        store.atomic_upsert("jobs", "b", insert_value={"status": "pending"})
        store.atomic_upsert(
            "jobs",
            "b",
            insert_value={},
            mutations=[{"field": "n", "operation": "increment", "value": 1}],
            idempotency_key="k-upsert",
        )
        assert len(arrived()) == 2


def test_writes_that_change_nothing_notify_nobody(url: str, listen) -> None:
    arrived = listen("jobs")
    with AtomicStore(url) as store:
        store.put("jobs", "a", {"status": "pending"})
        arrived()
        store.atomic_upsert("jobs", "a", insert_value={"status": "pending"})  # seed: exists
        store.atomic_update(
            "jobs",
            "a",
            where=[{"field": "status", "operator": "equals", "value": "done"}],
            mutations=[{"field": "n", "operation": "set", "value": 1}],
        )
        store.atomic_update(
            "jobs", "missing", mutations=[{"field": "n", "operation": "set", "value": 1}]
        )
        assert arrived() == []


def test_claims_notify_only_when_asked(url: str, listen) -> None:
    arrived = listen("jobs")
    with AtomicStore(url) as quiet, AtomicStore(url, notify="all") as loud:
        for n in range(4):
            quiet.put("jobs", f"p{n}", {"status": "pending"})
        arrived()
        assert quiet.atomic_claim("jobs", where=PENDING, limit=1)["count"] == 1
        assert arrived() == []
        assert loud.atomic_claim("jobs", where=PENDING, limit=2)["count"] == 2
        assert len(arrived()) == 1  # once per statement, not per row
        assert loud.atomic_claim("jobs", where=PENDING, limit=1, idempotency_key="c1")["count"] == 1
        assert len(arrived()) == 1
        assert loud.atomic_claim("jobs", where=PENDING, limit=1)["count"] == 0
        assert arrived() == []  # an empty claim changed nothing


def test_off_never_notifies_and_other_tables_stay_quiet(url: str, listen) -> None:
    arrived = listen("jobs")
    with AtomicStore(url, notify="off") as off, AtomicStore(url) as store:
        off.put("jobs", "a", {"status": "pending"})
        store.put("other", "a", {"status": "pending"})
        assert arrived() == []


def test_a_bad_notify_mode_names_the_field(url: str) -> None:
    with pytest.raises(SpecError) as raised:
        AtomicStore(url, notify="sometimes")
    assert raised.value.field == "notify"
