"""Retryable means retryable: outages are StoreUnavailableError, permanent failures are not.

psycopg files some permanent server errors under ``OperationalError`` (SQLSTATE
class 54, "program limit exceeded", for one); the store decides by SQLSTATE, so
only connection trouble, lock and statement timeouts, serialisation failures,
resource shortages and server shutdowns are reported as retryable.
"""

from __future__ import annotations

import os

import pytest

from airflow_atomic_store import AtomicStore, AtomicStoreError, StoreUnavailableError
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
