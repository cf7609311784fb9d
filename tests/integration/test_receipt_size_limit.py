"""A keyed call whose result is too large for its receipt is refused alike on both backends.

PostgreSQL cannot hold a ``jsonb`` value of 256 MB or more: a keyed claim over that
much failed there with an untyped error while SQLite recorded and replayed it. Both
now refuse a result above ``store/contract.py``'s ``MAX_RESULT_BYTES`` with
``ResultTooLargeError`` naming the limit, and apply nothing. The limit is lowered
here so that a few hundred kilobytes show it (256 MB took minutes to write and claim).
"""

from __future__ import annotations

import pytest

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.exceptions import ResultTooLargeError
from airflow_atomic_store.store import contract as receipts

LIMIT = 100_000
PAD = "x" * 20_000  # ten rows: about 200 kB of result, four rows about 80 kB


@pytest.fixture
def queue(store: AtomicStore, monkeypatch: pytest.MonkeyPatch) -> AtomicStore:
    monkeypatch.setattr(receipts, "MAX_RESULT_BYTES", LIMIT)
    for n in range(10):
        store.put("q", f"k{n}", {"status": "pending", "pad": PAD})
    return store


def _pending(store: AtomicStore) -> int:
    where = [{"field": "status", "operator": "equals", "value": "pending"}]
    return len(store.query("q", where=where, limit=100))


def test_a_keyed_claim_over_the_limit_is_refused_naming_it_and_claims_nothing(queue):
    with pytest.raises(ResultTooLargeError) as raised:
        queue.atomic_claim("q", limit=10, idempotency_key="big")
    assert raised.value.limit == LIMIT
    assert f"more than the receipt limit of {LIMIT} bytes" in str(raised.value)
    assert raised.value.size is not None and raised.value.size > LIMIT
    assert _pending(queue) == 10
    # Nothing was recorded under the key: a claim that fits applies, then replays.
    first = queue.atomic_claim("q", limit=4, idempotency_key="big")
    assert (first["count"], first.get("replayed", False)) == (4, False)
    again = queue.atomic_claim("q", limit=4, idempotency_key="big")
    assert again["replayed"] is True and again["claimed"] == first["claimed"]
    assert _pending(queue) == 6


def test_the_limit_binds_receipts_only(queue):
    assert queue.atomic_claim("q", limit=10)["count"] == 10


def test_a_keyed_update_whose_value_is_over_the_limit_is_refused_and_writes_nothing(queue):
    queue.put("q", "big", {"pad": PAD * 6})
    mutations = [{"field": "n", "operation": "increment", "value": 1}]
    with pytest.raises(ResultTooLargeError):
        queue.atomic_update("q", "big", mutations=mutations, idempotency_key="u")
    assert "n" not in queue.get("q", "big")


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_postgresql_s_own_jsonb_limit_is_the_same_typed_error(store_url: str) -> None:
    """A result built past 256 MB fails in ``jsonb_agg`` before the receipt can measure it."""
    import psycopg

    from airflow_atomic_store.store.postgres.connection import JSONB_MAX_BYTES, translate

    with (
        psycopg.connect(store_url, autocommit=True) as connection,
        pytest.raises(psycopg.Error) as raised,
    ):
        connection.execute("SELECT jsonb_agg(repeat('x', 100000000)) FROM generate_series(1, 3)")
    error = translate(raised.value, ())
    assert isinstance(error, ResultTooLargeError)
    assert error.limit == JSONB_MAX_BYTES == receipts.MAX_RESULT_BYTES
