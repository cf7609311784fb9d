"""``AtomicStoreHook`` against real stores, and its connection errors.

Outside a running task, ``BaseHook.get_connection`` reads ``AIRFLOW_CONN_*``
environment variables, which is how each test defines its connection.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import pytest

from airflow_atomic_store import (
    AtomicStore,
    AtomicStoreHook,
    ConnectionConfigError,
    SpecError,
    StoreUnavailableError,
)
from airflow_atomic_store.hooks.atomic_store import STORE_VERBS
from devkit.postgres_server import PostgresServer
from tests.support.specs import IS_PENDING as PENDING


def define(monkeypatch: pytest.MonkeyPatch, conn_id: str, value: str | dict) -> None:
    text = value if isinstance(value, str) else json.dumps(value)
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", text)


def test_the_hook_offers_every_verb_of_the_store(store_conn: str) -> None:
    with AtomicStoreHook(conn_id=store_conn) as hook:
        hook.put("pending_ops", "op-1", {"status": "pending"})
        assert hook.get("pending_ops", "op-1") == {"status": "pending"}
        seeded = hook.atomic_upsert("rate_limits", "api", insert_value={"tokens": 1})
        assert seeded == {"inserted": True, "value": {"tokens": 1}, "key": "api"}
        taken = hook.atomic_update(
            "rate_limits",
            "api",
            where=[{"field": "tokens", "operator": "gt", "value": 0}],
            mutations=[{"field": "tokens", "operation": "increment", "value": -1}],
        )
        assert taken == {"updated": True, "value": {"tokens": 0}, "key": "api"}
        claim = hook.atomic_claim("pending_ops", execution_id="dag/run")
        assert claim["count"] == 1
        assert claim["claimed"][0]["value"]["claimedBy"] == "dag/run"
        assert (
            hook.query("pending_ops", where={"field": "status", "operator": "eq", "value": "x"})
            == []
        )
        assert hook.delete("pending_ops", "op-1") is True
        assert hook.get("pending_ops", "op-1") is None
        index = hook.ensure_claim_index(table="pending_ops", where=[PENDING])
        assert index == hook.ensure_claim_index(table="pending_ops", where=[PENDING])
        assert [s["name"] for s in hook.claim_sets("pending_ops")] == [index]
        # On a table this small PostgreSQL may rightly prefer a scan to the set's index
        # (tests/integration/test_claim_sets.py checks plans on an aged queue).
        assert "atomic_store_rows" in hook.explain_claim(
            "pending_ops", where=[PENDING], generic=True
        )
        assert hook.drop_claim_set(index) is True
        assert hook.claim_sets() == []


def test_the_hooks_verbs_are_the_stores_with_the_stores_signatures() -> None:
    """One declaration per verb: the hook derives each verb from AtomicStore's own."""
    shared = {
        name
        for name in vars(AtomicStoreHook)
        if not name.startswith("_") and name != "close" and hasattr(AtomicStore, name)
    }
    assert shared == set(STORE_VERBS)
    hook = AtomicStoreHook()
    for name in STORE_VERBS:
        store_verb = getattr(AtomicStore, name)
        assert inspect.signature(getattr(AtomicStoreHook, name)) == inspect.signature(store_verb)
        unbound = list(inspect.signature(store_verb).parameters.values())
        assert list(inspect.signature(getattr(hook, name)).parameters.values()) == unbound[1:]
        assert getattr(AtomicStoreHook, name).__doc__ == store_verb.__doc__


def test_the_default_connection_id_is_atomic_store_default(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    define(monkeypatch, "atomic_store_default", store_url)
    with AtomicStoreHook() as hook:
        hook.put("t", "k", {"v": 1})
        assert hook.get_conn().get("t", "k") == {"v": 1}


def test_spec_errors_pass_through_the_hook_unchanged(store_conn: str) -> None:
    with AtomicStoreHook(conn_id=store_conn) as hook, pytest.raises(SpecError, match="limit"):
        hook.atomic_claim("t", limit=0)


def test_test_connection_reports_a_reachable_store(store_conn: str) -> None:
    ok, message = AtomicStoreHook(conn_id=store_conn).test_connection()
    assert ok, message


def test_test_connection_reports_an_unreachable_store(monkeypatch: pytest.MonkeyPatch) -> None:
    define(monkeypatch, "down", "postgresql://postgres@127.0.0.1:1/nowhere")
    ok, message = AtomicStoreHook(conn_id="down").test_connection()
    assert not ok and "127.0.0.1" in message


def test_a_missing_connection_says_how_to_define_it() -> None:
    hook = AtomicStoreHook(conn_id="no_such_store")
    with pytest.raises(ConnectionConfigError) as caught:
        hook.put("t", "k", {})
    message = str(caught.value)
    assert "'no_such_store' is not defined" in message
    assert "AIRFLOW_CONN_NO_SUCH_STORE='sqlite:////abs/path/store.db'" in message
    assert "airflow connections add no_such_store --conn-uri" in message


def test_an_unsupported_connection_type_lists_the_supported_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    define(monkeypatch, "mysql_store", "mysql://user@db:3306/x")
    with pytest.raises(ConnectionConfigError, match=r"type 'mysql'.*postgres, sqlite"):
        AtomicStoreHook(conn_id="mysql_store").get_conn()


@pytest.mark.parametrize(
    "value",
    [
        "sqlite:///relative/store.db",
        {"conn_type": "sqlite"},
        {"conn_type": "sqlite", "host": "/abs/a.db", "schema": "/abs/b.db"},
    ],
    ids=["relative-path", "no-path", "two-paths"],
)
def test_a_sqlite_connection_needs_one_absolute_path(
    monkeypatch: pytest.MonkeyPatch, value: str | dict
) -> None:
    define(monkeypatch, "bad_sqlite", value)
    with pytest.raises(ConnectionConfigError, match="absolute path") as caught:
        AtomicStoreHook(conn_id="bad_sqlite").get_conn()
    assert "AIRFLOW_CONN_BAD_SQLITE='sqlite:////abs/path/store.db'" in str(caught.value)


def test_a_sqlite_path_may_be_given_as_the_host(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pytest.TempPathFactory
) -> None:
    path = f"{tmp_path}/hosted.db"
    define(monkeypatch, "hosted", {"conn_type": "sqlite", "host": path})
    with AtomicStoreHook(conn_id="hosted") as hook:
        hook.put("t", "k", {"v": 1})
    with AtomicStoreHook(conn_id="hosted") as again:
        assert again.get("t", "k") == {"v": 1}


@contextmanager
def postgres_connection(
    server: PostgresServer, monkeypatch: pytest.MonkeyPatch, conn_id: str, extra: dict
) -> Iterator[None]:
    """A ``postgres``-type Airflow connection ``conn_id`` with ``extra``, to a fresh role."""
    role = f"hook_{conn_id}_{os.getpid()}"
    parts = urlsplit(server.create_user_schema(role))
    try:
        define(
            monkeypatch,
            conn_id,
            {
                "conn_type": "postgres",
                "host": parts.hostname,
                "port": parts.port,
                "login": parts.username,
                "schema": parts.path.lstrip("/"),
                "extra": extra,
            },
        )
        yield
    finally:
        server.drop_user_schema(role)


@pytest.mark.postgres
def test_postgres_connections_go_through_the_postgres_provider_with_their_extras(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Extras reach psycopg (application_name), and a dict-row cursor extra does not break us."""
    extra = {"application_name": "atomic-hook-test", "cursor": "dictcursor"}
    with (
        postgres_connection(postgres_server, monkeypatch, "pg_extras", extra),
        AtomicStoreHook(conn_id="pg_extras") as hook,
    ):
        hook.put("t", "k", {"v": 1})
        assert hook.get("t", "k") == {"v": 1}
        assert hook.atomic_claim("t", execution_id="d/r")["count"] == 1
        names = [row["value"] for row in _activity(hook)]
        assert "atomic-hook-test" in names


def _activity(hook: AtomicStoreHook) -> list[dict]:
    """application_name of every session on the hook's database, read through a second hook."""
    import psycopg

    store_connection = hook.store._backend.connection._connection  # type: ignore[attr-defined]
    info = store_connection.info
    with psycopg.connect(
        host=info.host, port=info.port, user=info.user, dbname=info.dbname
    ) as conn:
        rows = conn.execute(
            "SELECT application_name FROM pg_stat_activity WHERE datname = %s", (info.dbname,)
        ).fetchall()
    return [{"value": name} for (name,) in rows]


@pytest.mark.postgres
def test_the_prepare_threshold_extra_turns_statement_preparing_off_for_pgbouncer(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/deploying.md tells PgBouncer (transaction mode) users to set this extra."""
    pending = {"field": "status", "operator": "equals", "value": "pending"}
    extra = {"prepare_threshold": None}
    with (
        postgres_connection(postgres_server, monkeypatch, "pg_unprepared", extra),
        AtomicStoreHook(conn_id="pg_unprepared") as hook,
    ):
        for n in range(10):
            hook.put("t", f"k{n}", {"status": "pending"})
            hook.atomic_claim("t", where=pending, limit=1, execution_id="d/r")
        connection = hook.store._backend.connection._connection  # type: ignore[attr-defined]
        prepared = connection.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
        assert prepared == (0,)
        assert len(hook.query("t", where={**pending, "value": "in_flight"})) == 10


def _queue_claim_declares_a_set(hook: AtomicStoreHook) -> bool:
    hook.put("jobs", "j-1", {"status": "pending"})
    assert hook.atomic_claim("jobs", where=[PENDING])["count"] == 1
    return bool(hook.claim_sets("jobs"))


@pytest.mark.postgres
def test_the_auto_claim_sets_extra_is_accepted_ignored_and_never_reaches_psycopg(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claims no longer build sets (0.1.0): saved connections keep working unchanged."""
    for conn_id, value in (("pg_no_sets", False), ("pg_sets", "true")):
        with (
            postgres_connection(postgres_server, monkeypatch, conn_id, {"auto_claim_sets": value}),
            AtomicStoreHook(conn_id=conn_id) as hook,
        ):
            assert _queue_claim_declares_a_set(hook) is True  # the schema's pending set


def test_the_auto_claim_sets_extra_is_accepted_on_sqlite_and_is_validated(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    path = tmp_path / "store.db"
    define(
        monkeypatch,
        "lite_no_sets",
        {"conn_type": "sqlite", "host": str(path), "extra": {"auto_claim_sets": False}},
    )
    with AtomicStoreHook(conn_id="lite_no_sets") as hook:
        assert _queue_claim_declares_a_set(hook) is True  # the schema's pending set
    define(
        monkeypatch,
        "lite_bad",
        {"conn_type": "sqlite", "host": str(path), "extra": {"auto_claim_sets": "sometimes"}},
    )
    with pytest.raises(ConnectionConfigError, match="auto_claim_sets"):
        AtomicStoreHook(conn_id="lite_bad").get("jobs", "j-1")


def test_the_storage_table_extra_keeps_a_connections_rows_in_a_physical_table_of_their_own(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/backends.md: hot single-row state kept apart from the queues' claimable sets.

    Two connections to one database, one with ``{"storage_table": "hot_rows"}``: the
    same logical table and key are two rows, and each connection reads and writes
    only its own (the hook, the trigger and the CLI all open stores from connections).
    """
    define(monkeypatch, "hot_state", f"{store_url}?storage_table=hot_rows")
    define(monkeypatch, "queues", store_url)
    take = {
        "where": [{"field": "tokens", "operator": "gt", "value": 0}],
        "mutations": [{"field": "tokens", "operation": "increment", "value": -1}],
    }
    with AtomicStoreHook(conn_id="hot_state") as hot, AtomicStoreHook(conn_id="queues") as queues:
        hot.put("rate_limits", "api", {"tokens": 5})
        queues.put("rate_limits", "api", {"tokens": 1})
        assert hot.atomic_update("rate_limits", "api", **take)["value"] == {"tokens": 4}
        assert queues.get("rate_limits", "api") == {"tokens": 1}
    with AtomicStore(store_url, storage_table="hot_rows") as direct:
        assert direct.get("rate_limits", "api") == {"tokens": 4}


def test_a_storage_table_extra_that_is_not_a_plain_identifier_fails_before_any_write(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    define(monkeypatch, "bad_storage", f"{store_url}?storage_table=rows%3B+drop+table+x")
    with pytest.raises(SpecError, match="plain SQL identifier") as raised:
        AtomicStoreHook(conn_id="bad_storage").put("t", "k", {"v": 1})
    assert raised.value.field == "storage_table"
    with AtomicStore(store_url) as store:
        assert store.get("t", "k") is None


def test_a_sqlite_connection_refuses_an_extra_the_store_cannot_use(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """SQLite has no driver to pass extras on to: a lock_timeout extra would be lost."""
    path = tmp_path / "store.db"
    define(
        monkeypatch,
        "lite_extra",
        {"conn_type": "sqlite", "host": str(path), "extra": {"lock_timeout": 5}},
    )
    with pytest.raises(ConnectionConfigError, match="lock_timeout") as raised:
        AtomicStoreHook(conn_id="lite_extra").get("jobs", "j-1")
    assert "'lite_extra' (sqlite)" in str(raised.value)
    assert not path.exists()


def test_a_notify_extra_is_for_postgres_connections_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    define(
        monkeypatch,
        "lite_notify",
        {"conn_type": "sqlite", "host": str(tmp_path / "store.db"), "extra": {"notify": "all"}},
    )
    with pytest.raises(SpecError, match="SQLite backend does not support notify") as raised:
        AtomicStoreHook(conn_id="lite_notify").get("jobs", "j-1")
    assert raised.value.field == "notify"


@pytest.mark.postgres
@pytest.mark.parametrize(
    "connection",
    [
        "postgresql://someone:Kx7q@Zr9w@127.0.0.1:1/atomic_store",  # an unencoded "@"
        {
            "conn_type": "postgres",
            "host": "127.0.0.1",
            "port": 1,
            "login": "someone",
            "password": "Kx7q@Zr9w",
            "schema": "atomic_store",
        },
    ],
    ids=["uri", "json"],
)
def test_a_connection_password_never_reaches_an_error_message(
    monkeypatch: pytest.MonkeyPatch, connection: str | dict
) -> None:
    define(monkeypatch, "with_password", connection)
    hook = AtomicStoreHook(conn_id="with_password")

    ok, message = hook.test_connection()
    with pytest.raises(StoreUnavailableError) as raised:
        hook.put("t", "k", {})

    assert not ok and 'connection to server at "127.0.0.1", port 1 failed' in message
    shown = [message]
    error: BaseException | None = raised.value
    while error is not None:
        shown.append(str(error))
        error = error.__cause__ or error.__context__
    assert not [text for text in shown if "Kx7q" in text or "Zr9w" in text]
