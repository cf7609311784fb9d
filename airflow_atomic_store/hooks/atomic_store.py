"""``AtomicStoreHook``: an ``AtomicStore`` opened from an ordinary Airflow connection."""

from __future__ import annotations

import copy
import functools
import json
import os
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowNotFoundException, BaseHook

from airflow_atomic_store import (
    compat,  # noqa: F401  (refuses an Airflow below the floor)
    connection_form,
)
from airflow_atomic_store.exceptions import ConnectionConfigError
from airflow_atomic_store.store import AtomicStore

if TYPE_CHECKING:
    from airflow.sdk import Connection

SUPPORTED_CONN_TYPES = ("postgres", "sqlite")
#: The store's verbs the hook answers (each is ``AtomicStore``'s own method).
STORE_VERBS = (
    "atomic_update",
    "atomic_claim",
    "atomic_upsert",
    "count",
    "get",
    "put",
    "delete",
    "query",
    "ensure_claim_index",
    "claim_sets",
    "drop_claim_set",
    "explain_claim",
    "retire",
    "atomic_upsert_many",
    "atomic_update_many",
)
_EXAMPLE_SQLITE_URI = "sqlite:////abs/path/store.db"
_EXAMPLE_POSTGRES_URI = "postgresql://user:password@host:5432/dbname"


def _store_verb(method: Callable[..., Any]) -> Callable[..., Any]:
    """The hook's ``method``: the store's own function, wrapped, called on
    :attr:`AtomicStoreHook.store`, so ``inspect.signature`` and ``help()`` show exactly
    what the store declares."""

    @functools.wraps(method)
    def verb(self: AtomicStoreHook, /, *args: Any, **kwargs: Any) -> Any:
        return method(self.store, *args, **kwargs)

    verb.__qualname__ = f"AtomicStoreHook.{method.__name__}"
    return verb


class AtomicStoreHook(BaseHook):
    """Open the atomic store that an Airflow connection points at.

    Two connection types work:

    * ``postgres`` -- the production backend, shared by workers on many machines.
      The database connection is made by the PostgreSQL provider's hook, so that
      connection's extras (``sslmode``, ``sslrootcert``, IAM, ``options``...) apply.
    * ``sqlite`` -- an embedded store in one file, for a single machine; the absolute
      file path goes in the connection's host, or in the URI path:
      ``AIRFLOW_CONN_ATOMIC_STORE_DEFAULT='sqlite:////abs/path/store.db'``.

    :meth:`get_conn` (or :attr:`store`) hands out the
    :class:`~airflow_atomic_store.AtomicStore`. For a ``@task``'s convenience the hook
    also answers the store's verbs (:data:`STORE_VERBS`), which are the store's own
    methods with the store's signatures, not copies::

        @task
        def enqueue(op_id: str, payload: dict) -> None:
            AtomicStoreHook().put("pending_ops", op_id, {"status": "pending", "payload": payload})

    Inside a task, pass ``execution_id=execution_id(get_current_context())`` (from
    :mod:`airflow_atomic_store.templating`) to ``atomic_claim`` so the default
    ``claimedBy`` is the DAG run, as with the operator.

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

    def open_read_only(self) -> AtomicStore:
        """A new store on the connection, opened only to read (``read_only=True``), as
        inspection opens it: nothing is created, and where no store is, the first call
        raises :class:`~airflow_atomic_store.exceptions.ConnectionConfigError`. The
        caller closes it; :attr:`store` is not touched."""
        return _open_store(self.conn_id, self._connection(), read_only=True)

    def close(self) -> None:
        """Close the store if it was opened; the next call opens it again."""
        store = self.__dict__.pop("store", None)
        if store is not None:
            store.close()

    def __enter__(self) -> AtomicStoreHook:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The SQLite form's standard fields, for Airflow 3.0/3.1 (3.2+ reads provider info)."""
        return connection_form.BEHAVIOUR

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """The SQLite form's store options, for Airflow 3.0/3.1 (3.2+ reads provider info)."""
        return connection_form.widgets()

    def test_connection(self) -> tuple[bool, str]:
        """Check that the store answers (used by the UI's connection test)."""
        try:
            self.store.query("__connection_test__", limit=1)
        except Exception as exc:
            return False, str(exc)
        finally:
            self.close()
        return True, "the atomic store answered"

    # -- the store's verbs: derived from AtomicStore's, never restated ----------------------

    atomic_update = _store_verb(AtomicStore.atomic_update)
    atomic_claim = _store_verb(AtomicStore.atomic_claim)
    atomic_upsert = _store_verb(AtomicStore.atomic_upsert)
    count = _store_verb(AtomicStore.count)
    get = _store_verb(AtomicStore.get)
    put = _store_verb(AtomicStore.put)
    delete = _store_verb(AtomicStore.delete)
    query = _store_verb(AtomicStore.query)
    ensure_claim_index = _store_verb(AtomicStore.ensure_claim_index)
    claim_sets = _store_verb(AtomicStore.claim_sets)
    drop_claim_set = _store_verb(AtomicStore.drop_claim_set)
    explain_claim = _store_verb(AtomicStore.explain_claim)
    retire = _store_verb(AtomicStore.retire)
    atomic_upsert_many = _store_verb(AtomicStore.atomic_upsert_many)
    atomic_update_many = _store_verb(AtomicStore.atomic_update_many)

    # -- connection handling ----------------------------------------------------------------

    def _connection(self) -> Connection:
        try:
            return self.get_connection(self.conn_id)
        except AirflowNotFoundException as exc:
            raise ConnectionConfigError(missing_connection_message(self.conn_id)) from exc


#: Extras handed to the store as the options of the same name, which it validates:
#: seconds; writes | all | off; a plain identifier.
_STORE_OPTION_EXTRAS = ("receipt_retention", "notify", "storage_table", "busy_timeout")
#: Connection extras that configure the store itself (never passed to the database driver).
STORE_EXTRAS = ("auto_claim_sets", *_STORE_OPTION_EXTRAS)


def _open_store(conn_id: str, conn: Connection, *, read_only: bool = False) -> AtomicStore:
    conn_type = (conn.conn_type or "").lower()
    options = {**_store_options(conn_id, conn), "read_only": read_only}
    if conn_type in ("postgres", "postgresql"):
        connector = _postgres_connector(conn_id, _without_store_extras(conn))
        return AtomicStore.from_connection_factory(
            "postgresql", connector, secrets=(conn.password or "",), **options
        )
    if conn_type == "sqlite":
        _refuse_unused_extras(conn_id, conn)
        return AtomicStore(f"sqlite:///{_sqlite_path(conn_id, conn)}", **options)
    raise ConnectionConfigError(
        f"connection {conn_id!r} has type {conn.conn_type!r}; the atomic store supports "
        f"connection types: {', '.join(SUPPORTED_CONN_TYPES)}"
    )


def _store_options(conn_id: str, conn: Connection) -> dict[str, Any]:
    # A form field left empty is saved as null or "": the store's default, as if absent.
    extras = {k: v for k, v in conn.extra_dejson.items() if v is not None and v != ""}
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
        # Accepted, and ignored: claims no longer build claimable sets (CHANGELOG 0.1.0).
    options.update((name, extras[name]) for name in _STORE_OPTION_EXTRAS if name in extras)
    return options


def _refuse_unused_extras(conn_id: str, conn: Connection) -> None:
    """A SQLite connection has no driver to pass extras to: an unknown one would be lost."""
    unused = sorted(set(conn.extra_dejson) - set(STORE_EXTRAS))
    if unused:
        raise ConnectionConfigError(
            f"connection {conn_id!r} (sqlite): the atomic store cannot use the extra(s) "
            f"{', '.join(unused)}; a SQLite connection takes {', '.join(STORE_EXTRAS)}"
        )


def _without_store_extras(conn: Connection) -> Connection:
    """A copy for the Postgres provider, which passes every other extra on to psycopg."""
    extras = conn.extra_dejson
    if not any(name in extras for name in STORE_EXTRAS):
        return conn
    stripped = copy.deepcopy(conn)
    stripped.extra = json.dumps({k: v for k, v in extras.items() if k not in STORE_EXTRAS})
    return stripped


def store_from_connection(
    conn_id: str, conn: Connection, *, read_only: bool = False
) -> AtomicStore:
    """The store behind an already fetched connection (a trigger fetches it asynchronously;
    the command line through Airflow's core model, read-only)."""
    return _open_store(conn_id, conn, read_only=read_only)


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

    # get_conn() ends in _create_connection from provider 6.8.0 on (compat refuses older).
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

    # A "cursor" extra (dictcursor…) may set a row factory; the store resets it. The
    # store refuses a connection that is not psycopg 3's (an old provider's psycopg2).
    return PostgresHook(postgres_conn_id=conn_id, connection=conn).get_conn


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


def missing_connection_message(conn_id: str) -> str:
    return (
        f"the atomic store connection {conn_id!r} is not defined. Define it with an "
        f"environment variable, for example\n"
        f"    export {_env_var(conn_id)}='{_EXAMPLE_SQLITE_URI}'\n"
        f"or with the CLI, for example\n"
        f"    airflow connections add {conn_id} --conn-uri '{_EXAMPLE_POSTGRES_URI}'\n"
        f"(supported connection types: {', '.join(SUPPORTED_CONN_TYPES)})"
    )
