"""Retryable means retryable: outages are StoreUnavailableError, permanent failures are not.

psycopg files some permanent server errors under ``OperationalError`` (SQLSTATE
class 54, "program limit exceeded", for one); the store decides by SQLSTATE, so
only connection trouble, lock and statement timeouts, serialisation failures,
resource shortages and server shutdowns are reported as retryable. A refusal
for good (a wrong password, pg_hba.conf, a missing privilege, an unknown role or
database) is an ``AccessDeniedError``: libpq reports a refused connect without a
SQLSTATE, so it is known by the server's text there.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterator

import pytest

from airflow_atomic_store import (
    AccessDeniedError,
    AtomicStore,
    AtomicStoreError,
    ConnectionConfigError,
    StoreUnavailableError,
)
from devkit.postgres_server import PostgresServer
from tests.support.physical import PHYSICAL_TABLE


def test_an_unreachable_database_is_a_retryable_error(unreachable_url: str) -> None:
    with AtomicStore(unreachable_url) as store, pytest.raises(StoreUnavailableError):
        store.atomic_upsert("t", "k", insert_value={})


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_statement_postgresql_rejects_for_good_is_not_reported_as_retryable(
    store: AtomicStore,
) -> None:
    # An expression index on a field (a user's own) holds its value, and a btree entry
    # is limited to about 2.7 kB: this write can never succeed, however often retried.
    store.get("t", "k")  # the schema exists
    with store._backend._cursor() as cursor:  # type: ignore[attr-defined]
        cursor.execute(
            f"CREATE INDEX users_own_status_idx ON {PHYSICAL_TABLE} ((value -> 'status'))"
        )
    with pytest.raises(AtomicStoreError, match="index row size") as raised:
        store.put("t", "k", {"status": os.urandom(3000).hex()})
    assert not isinstance(raised.value, StoreUnavailableError)
    assert raised.value.__cause__.sqlstate == "54000"
    # The connection survives a statement error: the next call just works.
    store.put("t", "k", {"status": "pending"})
    assert store.get("t", "k") == {"status": "pending"}


@pytest.fixture
def role(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh login role owning its own schema (dropped afterwards)."""
    name = f"auth_{os.getpid()}_{next(_roles)}"
    postgres_server.create_user_schema(name)
    try:
        yield name
    finally:
        postgres_server.drop_user_schema(name)


_roles = itertools.count(1)


@pytest.mark.postgres
def test_a_wrong_password_is_a_final_access_denied_error_that_never_shows_the_password(
    postgres_server: PostgresServer, role: str
) -> None:
    good = postgres_server.require_password(role, "right-horse-battery")
    wrong = good.replace("right-horse-battery", "Wr0ngSecretValue")

    with AtomicStore(wrong) as store, pytest.raises(AccessDeniedError) as raised:
        store.atomic_upsert("t", "k", insert_value={})

    assert not isinstance(raised.value, StoreUnavailableError)
    assert isinstance(raised.value, ConnectionConfigError)
    assert f'password authentication failed for user "{role}"' in str(raised.value)
    assert "Wr0ngSecretValue" not in str(raised.value)
    assert "right-horse-battery" not in str(raised.value)
    with AtomicStore(good) as store:  # the right password connects
        assert store.atomic_upsert("t", "k", insert_value={})["inserted"] is True


def _url(server: PostgresServer, role: str, dbname: str | None = None) -> str:
    return f"postgresql://{role}@127.0.0.1:{server.port}/{dbname or server.dbname}"


def _no_password_given(server: PostgresServer, role: str) -> str:
    server.require_password(role, "a-password")
    return _url(server, role)


def _rejected_by_pg_hba(server: PostgresServer, role: str) -> str:
    server.add_hba_line(f"host all {role} 127.0.0.1/32 reject")
    return _url(server, role)


def _may_not_log_in(server: PostgresServer, role: str) -> str:
    server.execute(f'ALTER ROLE "{role}" NOLOGIN')
    return _url(server, role)


def _no_connect_privilege(server: PostgresServer, role: str) -> str:
    server.execute(f'REVOKE CONNECT ON DATABASE "{server.dbname}" FROM PUBLIC, "{role}"')
    return _url(server, role)


def _no_privilege_on_the_schema(server: PostgresServer, role: str) -> str:
    # Its search path becomes a schema it may not create in: creating the table fails.
    server.execute(f'ALTER ROLE "{role}" SET search_path = public', dbname=server.dbname)
    return _url(server, role)


#: How each refusal is set up (returning the URL that is refused), and what the server says.
REFUSALS: dict[str, tuple[Callable[[PostgresServer, str], str], str]] = {
    "no password given": (_no_password_given, "no password supplied"),
    "pg_hba.conf rejects the role": (_rejected_by_pg_hba, "pg_hba.conf rejects connection"),
    "role may not log in": (_may_not_log_in, "is not permitted to log in"),
    "no CONNECT on the database": (_no_connect_privilege, "permission denied for database"),
    "unknown role": (lambda server, _: _url(server, "nobody_by_that_name"), "does not exist"),
    "unknown database": (lambda server, role: _url(server, role, "no_such_db"), "does not exist"),
    "no privilege on the schema": (_no_privilege_on_the_schema, "permission denied for schema"),
}


@pytest.mark.postgres
@pytest.mark.parametrize("refusal", list(REFUSALS))
def test_refused_logins_and_missing_privileges_are_final_access_denied_errors(
    postgres_server: PostgresServer, role: str, refusal: str
) -> None:
    set_up, text = REFUSALS[refusal]
    try:
        url = set_up(postgres_server, role)
        with AtomicStore(url) as store, pytest.raises(AccessDeniedError, match=text) as raised:
            store.atomic_upsert("t", "k", insert_value={})
    finally:
        postgres_server.execute(f'GRANT CONNECT ON DATABASE "{postgres_server.dbname}" TO PUBLIC')

    assert not isinstance(raised.value, StoreUnavailableError)
    assert "retrying cannot fix it" in str(raised.value)


def _fragments(password: str) -> list[str]:
    """The pieces of ``password`` that a URL parser could split it into."""
    return [piece for piece in re.split(r"[@/: %?#]", password) if piece] + [password]


def _everything_shown(error: BaseException | None) -> str:
    """Every message a log shows for the error: its own and its causes'."""
    messages = []
    while error is not None:
        messages.append(str(error))
        error = error.__cause__ or error.__context__
    return "\n".join(messages)


@pytest.mark.postgres
@pytest.mark.parametrize(
    "password",
    ["Kx7q@Zr9w", "Kx7q@Zr9w@Mm3v", "Kx7q Zr9w", "Kx7q%zzZr9w", "Kx7q/Zr9w:Mm3v", "Kx7q:Zr9w@Mm3v"],
)
def test_no_part_of_a_password_reaches_an_error_message(password: str) -> None:
    url = f"postgresql://someone:{password}@127.0.0.1:1/atomic_store"  # nothing listens on 1

    with AtomicStore(url) as store, pytest.raises(StoreUnavailableError) as raised:
        store.atomic_upsert("t", "k", insert_value={})

    assert 'connection to server at "127.0.0.1", port 1 failed' in str(raised.value)
    shown = _everything_shown(raised.value)
    assert [piece for piece in _fragments(password) if piece in shown] == []


@pytest.mark.postgres
def test_a_password_with_an_unencoded_at_sign_connects_and_a_wrong_one_is_never_shown(
    postgres_server: PostgresServer, role: str
) -> None:
    postgres_server.require_password(role, "p@ss/wo:rd")
    url = f"postgresql://{role}:p@ss/wo:rd@127.0.0.1:{postgres_server.port}/atomic_store"
    with AtomicStore(url) as store:  # read as Python and Airflow read it: up to the last "@"
        assert store.atomic_upsert("t", "k", insert_value={})["inserted"] is True

    wrong = url.replace("p@ss/wo:rd", "Wq4e@Rt5y/Ui6o:Pa7s")
    with AtomicStore(wrong) as store, pytest.raises(AccessDeniedError) as raised:
        store.get("t", "k")
    shown = _everything_shown(raised.value)
    assert "password authentication failed" in shown
    assert [piece for piece in _fragments("Wq4e@Rt5y/Ui6o:Pa7s") if piece in shown] == []
