"""Which backend a store URL opens, and the options each backend can honour.

An option a backend cannot honour is a :class:`SpecError` naming the backend
and what to use there instead: a dropped ``lock_timeout`` would let a SQLite
store wait for ever where its author asked for five seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.store.backend import Backend
from airflow_atomic_store.store.notify import DEFAULT_NOTIFY, parse_notify
from airflow_atomic_store.store.urls import parse_postgres_url, redact_url

#: Per backend: the options it cannot honour, each with what to use instead.
UNSUPPORTED_OPTIONS: Mapping[str, Mapping[str, str]] = {
    "SQLite": {
        "lock_timeout": "use busy_timeout (seconds a writer waits for the database lock)",
        "statement_timeout": (
            "SQLite cannot cancel a running statement; use busy_timeout to bound lock waits"
        ),
        "notify": ("SQLite has no notifications; its triggers poll (set their poll_interval)"),
    },
    "PostgreSQL": {
        "busy_timeout": (
            "use lock_timeout (seconds a statement waits for a row lock) or statement_timeout"
        ),
    },
}


def check_options(backend: str, options: Mapping[str, Any]) -> None:
    """Refuse every option given (not None) that ``backend`` cannot honour."""
    for name, instead in UNSUPPORTED_OPTIONS[backend].items():
        if options.get(name) is not None:
            raise SpecError(name, f"the {backend} backend does not support {name}: {instead}")


def _sqlite(url: str, options: dict[str, Any]) -> Backend:
    from airflow_atomic_store.store.sqlite.backend import SqliteBackend, path_from_url

    check_options("SQLite", options)
    settings = {"storage_table": options["storage_table"]}
    if options.get("busy_timeout") is not None:
        settings["busy_timeout"] = options["busy_timeout"]
    return SqliteBackend(path_from_url(url), read_only=options["read_only"], **settings)


def _postgres(url: str, options: dict[str, Any]) -> Backend:
    import psycopg

    parsed = parse_postgres_url(url)
    secrets = () if parsed.password is None else (parsed.password,)
    return _postgres_backend(lambda: psycopg.connect(parsed.dsn), secrets, options)


def _postgres_backend(
    connect: Callable[[], Any], secrets: tuple[str, ...], options: dict[str, Any]
) -> Backend:
    from airflow_atomic_store.store.postgres.backend import PostgresBackend

    check_options("PostgreSQL", options)
    return PostgresBackend(
        connect,
        storage_table=options["storage_table"],
        lock_timeout=options.get("lock_timeout"),
        statement_timeout=options.get("statement_timeout"),
        secrets=tuple(secret for secret in secrets if secret),
        notify=parse_notify(DEFAULT_NOTIFY if options.get("notify") is None else options["notify"]),
        read_only=options["read_only"],
    )


def open_factory_backend(
    dialect: str, connect: Callable[[], Any], secrets: tuple[str, ...], options: dict[str, Any]
) -> Backend:
    """A PostgreSQL backend whose connections come from ``connect()`` (the hook's)."""
    if dialect not in ("postgresql", "postgres"):
        raise SpecError("dialect", f"connection factories are for PostgreSQL, got {dialect!r}")
    return _postgres_backend(connect, secrets, options)


_BACKENDS: dict[str, Callable[[str, dict[str, Any]], Backend]] = {
    "sqlite": _sqlite,
    "postgresql": _postgres,
    "postgres": _postgres,
}


def open_backend(url: str, options: dict[str, Any]) -> Backend:
    """The backend ``url`` names, given the store's options (None: not given)."""
    scheme = url.split("://", 1)[0].split("+", 1)[0] if "://" in url else ""
    factory = _BACKENDS.get(scheme)
    if factory is None:
        raise SpecError(
            "url",
            f"unsupported store URL {redact_url(url)!r}; use sqlite:///… or postgresql://…",
        )
    if options.get("notify") is not None:
        parse_notify(options["notify"])  # a bad mode is named whichever the backend
    return factory(url, options)
