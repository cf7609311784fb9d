"""``AtomicStoreHook``: an ``AtomicStore`` opened from an ordinary Airflow connection."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_atomic_store.compat import AirflowNotFoundException, BaseHook
from airflow_atomic_store.exceptions import ConnectionConfigError
from airflow_atomic_store.store import AtomicStore

if TYPE_CHECKING:
    from airflow.sdk import Connection

SUPPORTED_CONN_TYPES = ("postgres", "sqlite")
_EXAMPLE_SQLITE_URI = "sqlite:////abs/path/store.db"
_EXAMPLE_POSTGRES_URI = "postgresql://user:password@host:5432/dbname"


class AtomicStoreHook(BaseHook):
    """Open the atomic store that an Airflow connection points at.

    Two connection types work:

    * ``postgres`` -- the production backend, shared by workers on many machines.
      The database connection is made by the PostgreSQL provider's hook, so that
      connection's extras (``sslmode``, ``sslrootcert``, IAM, ``options``...) apply.
    * ``sqlite`` -- an embedded store in one file, for a single machine; the absolute
      file path goes in the connection's host, or in the URI path:
      ``AIRFLOW_CONN_ATOMIC_STORE_DEFAULT='sqlite:////abs/path/store.db'``.

    The hook offers every method of :class:`~airflow_atomic_store.AtomicStore`
    (``atomic_update``, ``atomic_claim``, ``atomic_upsert``, ``get``, ``put``,
    ``delete``, ``query``), so a ``@task`` can use it directly::

        @task
        def enqueue(op_id: str, payload: dict) -> None:
            AtomicStoreHook().put("pending_ops", op_id, {"status": "pending", "payload": payload})

    The store is opened on first use and kept for the hook's lifetime; call
    :meth:`close` (or use the hook as a context manager) to release it early.

    :param conn_id: the Airflow connection id of the store.
    """

    conn_name_attr = "conn_id"
    default_conn_name = "atomic_store_default"
    # A hook registers one connection type. ``postgres`` belongs to the PostgreSQL
    # provider; ``sqlite`` is offered in the UI through this hook when no SQLite
    # provider is installed (see get_provider_info). Both types work either way.
    conn_type = "sqlite"
    hook_name = "Atomic Store (SQLite file)"

    def __init__(self, conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.conn_id = conn_id

    @cached_property
    def store(self) -> AtomicStore:
        """The :class:`~airflow_atomic_store.AtomicStore`, opened lazily from the connection."""
        return _open_store(self.conn_id, self._connection())

    def get_conn(self) -> AtomicStore:
        """Return :attr:`store` (the usual hook entry point)."""
        return self.store

    def close(self) -> None:
        """Close the store if it was opened; the next call opens it again."""
        store = self.__dict__.pop("store", None)
        if store is not None:
            store.close()

    def __enter__(self) -> AtomicStoreHook:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def test_connection(self) -> tuple[bool, str]:
        """Check that the store answers (used by the UI's connection test)."""
        try:
            self.store.query("__connection_test__", limit=1)
        except Exception as exc:
            return False, str(exc)
        finally:
            self.close()
        return True, "the atomic store answered"

    # -- the store's verbs (same signatures as AtomicStore) -------------------------------------

    def atomic_update(
        self,
        table: str,
        key: str,
        *,
        where: Any = None,
        match: str = "all",
        mutations: Any,
        return_fields: Sequence[str] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Compare-and-set one row; see ``AtomicStore.atomic_update``."""
        return self.store.atomic_update(
            table,
            key,
            where=where,
            match=match,
            mutations=mutations,
            return_fields=return_fields,
            idempotency_key=idempotency_key,
        )

    def atomic_claim(
        self,
        table: str,
        *,
        where: Any = None,
        match: str = "all",
        mutations: Any = None,
        order_by: str = "createdAt",
        direction: str = "asc",
        limit: int = 10,
        return_fields: Sequence[str] | None = None,
        execution_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Claim up to ``limit`` matching rows; see ``AtomicStore.atomic_claim``.

        Inside a task, pass ``execution_id=execution_id(get_current_context())`` (from
        :mod:`airflow_atomic_store.templating`) so the default ``claimedBy`` is the
        DAG run, as with the operator.
        """
        return self.store.atomic_claim(
            table,
            where=where,
            match=match,
            mutations=mutations,
            order_by=order_by,
            direction=direction,
            limit=limit,
            return_fields=return_fields,
            execution_id=execution_id,
            idempotency_key=idempotency_key,
        )

    def atomic_upsert(
        self,
        table: str,
        key: str,
        *,
        insert_value: dict[str, Any],
        mutations: Any = (),
        return_fields: Sequence[str] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Insert if absent, else mutate; see ``AtomicStore.atomic_upsert``."""
        return self.store.atomic_upsert(
            table,
            key,
            insert_value=insert_value,
            mutations=mutations,
            return_fields=return_fields,
            idempotency_key=idempotency_key,
        )

    def count(
        self, table: str, where: Any = None, match: str = "all", *, at_most: int = 1000
    ) -> int:
        """How many rows match ``where``, at most ``at_most``; see ``AtomicStore.count``."""
        return self.store.count(table, where, match, at_most=at_most)

    def get(self, table: str, key: str) -> dict[str, Any] | None:
        """The row's value, or None."""
        return self.store.get(table, key)

    def put(self, table: str, key: str, value: dict[str, Any]) -> None:
        """Create or replace a row's whole value."""
        self.store.put(table, key, value)

    def delete(self, table: str, key: str) -> bool:
        """Delete a row; True if it existed."""
        return self.store.delete(table, key)

    def query(
        self,
        table: str,
        where: Any = None,
        match: str = "all",
        order_by: str = "createdAt",
        direction: str = "asc",
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Read up to ``limit`` rows matching ``where`` as ``{key, value}`` dicts."""
        return self.store.query(
            table, where=where, match=match, order_by=order_by, direction=direction, limit=limit
        )

    def ensure_claim_index(
        self, *, table: str, where: Any, match: str = "all", order_by: str = "createdAt"
    ) -> str:
        """Declare a claimable set; see ``AtomicStore.ensure_claim_index``."""
        return self.store.ensure_claim_index(
            table=table, where=where, match=match, order_by=order_by
        )

    def claim_sets(self, table: str | None = None) -> list[dict[str, Any]]:
        """The store's claimable sets; see ``AtomicStore.claim_sets``."""
        return self.store.claim_sets(table)

    def drop_claim_set(self, name: str) -> bool:
        """Drop a claimable set; see ``AtomicStore.drop_claim_set``."""
        return self.store.drop_claim_set(name)

    def explain_claim(
        self,
        table: str,
        *,
        where: Any = None,
        match: str = "all",
        order_by: str = "createdAt",
        direction: str = "asc",
        limit: int = 10,
        generic: bool = False,
    ) -> str:
        """The plan of a claim's row selection; see ``AtomicStore.explain_claim``."""
        return self.store.explain_claim(
            table,
            where=where,
            match=match,
            order_by=order_by,
            direction=direction,
            limit=limit,
            generic=generic,
        )

    # -- connection handling ----------------------------------------------------------------

    def _connection(self) -> Connection:
        try:
            return self.get_connection(self.conn_id)
        except AirflowNotFoundException as exc:
            raise ConnectionConfigError(_missing_message(self.conn_id)) from exc


#: Connection extras that configure the store itself (never passed to the database driver).
STORE_EXTRAS = ("auto_claim_sets", "receipt_retention", "notify")


def _open_store(conn_id: str, conn: Connection) -> AtomicStore:
    conn_type = (conn.conn_type or "").lower()
    options = _store_options(conn_id, conn)
    if conn_type in ("postgres", "postgresql"):
        connector = _postgres_connector(conn_id, _without_store_extras(conn))
        return AtomicStore.from_connection_factory(
            "postgresql", connector, secrets=(conn.password or "",), **options
        )
    if conn_type == "sqlite":
        return AtomicStore(f"sqlite:///{_sqlite_path(conn_id, conn)}", **options)
    raise ConnectionConfigError(
        f"connection {conn_id!r} has type {conn.conn_type!r}; the atomic store supports "
        f"connection types: {', '.join(SUPPORTED_CONN_TYPES)}"
    )


def _store_options(conn_id: str, conn: Connection) -> dict[str, Any]:
    extras = conn.extra_dejson
    options: dict[str, Any] = {}
    if "auto_claim_sets" in extras:
        value = extras["auto_claim_sets"]
        if isinstance(value, str) and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        if not isinstance(value, bool):
            raise ConnectionConfigError(
                f"connection {conn_id!r}: the extra 'auto_claim_sets' must be true or false, "
                f"got {value!r}"
            )
        options["auto_claim_sets"] = value
    if "receipt_retention" in extras:  # seconds; the store validates it
        options["receipt_retention"] = extras["receipt_retention"]
    if "notify" in extras:  # writes | all | off; the store validates it
        options["notify"] = extras["notify"]
    return options


def _without_store_extras(conn: Connection) -> Connection:
    """A copy for the Postgres provider, which passes every other extra on to psycopg."""
    extras = conn.extra_dejson
    if not any(name in extras for name in STORE_EXTRAS):
        return conn
    stripped = copy.deepcopy(conn)
    stripped.extra = json.dumps({k: v for k, v in extras.items() if k not in STORE_EXTRAS})
    return stripped


def store_from_connection(conn_id: str, conn: Connection) -> AtomicStore:
    """The store behind an already fetched connection (a trigger fetches it asynchronously)."""
    return _open_store(conn_id, conn)


def postgres_connect_args(conn_id: str, conn: Connection) -> dict[str, Any] | None:
    """The keyword arguments the Postgres provider would connect with; None for SQLite.

    A trigger opens its own asynchronous connection (``psycopg.AsyncConnection``) to
    ``LISTEN``; taking the provider's arguments keeps the connection's extras (SSL,
    IAM tokens, ``options``) in one place. May block (an IAM token): call it off the
    event loop.
    """
    if (conn.conn_type or "").lower() not in ("postgres", "postgresql"):
        return None
    from airflow_atomic_store.compat import PostgresHook

    captured: dict[str, Any] = {}

    class _Arguments(PostgresHook):
        def _create_connection(self, conn_args: dict[str, Any]) -> Any:
            captured.update(conn_args)
            return None

    _Arguments(postgres_conn_id=conn_id, connection=_without_store_extras(conn)).get_conn()
    for name in ("cursor_factory", "row_factory"):  # a "cursor" extra: rows are ours
        captured.pop(name, None)
    return captured


def _postgres_connector(conn_id: str, conn: Connection) -> Callable[[], Any]:
    from airflow_atomic_store.compat import PostgresHook

    pg_hook = PostgresHook(postgres_conn_id=conn_id, connection=conn)

    def connect() -> Any:
        import psycopg

        connection = pg_hook.get_conn()
        if not isinstance(connection, psycopg.Connection):
            connection.close()
            raise ConnectionConfigError(
                f"connection {conn_id!r}: the PostgreSQL provider returned a "
                f"{type(connection).__module__} connection; the atomic store needs psycopg 3, "
                "which the provider uses when SQLAlchemy 2 and psycopg are installed"
            )
        # A "cursor" extra (dictcursor…) may set a row factory; the store resets it.
        return connection

    return connect


def _sqlite_path(conn_id: str, conn: Connection) -> str:
    host, schema = conn.host or "", conn.schema or ""
    path = host or schema
    if not path or (host and schema) or not os.path.isabs(path):
        raise ConnectionConfigError(
            f"connection {conn_id!r} (sqlite) needs the absolute path of the store file, "
            f"either as the host or as the URI path, e.g. "
            f"{_env_var(conn_id)}='{_EXAMPLE_SQLITE_URI}'; got host={host!r}, schema={schema!r}"
        )
    return path


def _env_var(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def _missing_message(conn_id: str) -> str:
    return (
        f"the atomic store connection {conn_id!r} is not defined. Define it with an "
        f"environment variable, for example\n"
        f"    export {_env_var(conn_id)}='{_EXAMPLE_SQLITE_URI}'\n"
        f"or with the CLI, for example\n"
        f"    airflow connections add {conn_id} --conn-uri '{_EXAMPLE_POSTGRES_URI}'\n"
        f"(supported connection types: {', '.join(SUPPORTED_CONN_TYPES)})"
    )
