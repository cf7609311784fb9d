"""A bad spec is a SpecError raised before the store touches the database.

The store connects lazily, so pointing it at a database that cannot be
reached proves the order: the spec is checked first, and only a valid spec
gets as far as the (failing) connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore, AtomicStoreError, SpecError
from tests.support.specs import INCREMENT as BUMP
from tests.support.specs import PENDING

BAD_CALLS: dict[str, Callable[[AtomicStore], Any]] = {
    "unknown-operator": lambda s: s.atomic_update(
        "t", "k", where=[{"field": "a", "operator": "resembles", "value": 1}], mutations=BUMP
    ),
    "empty-path-segment": lambda s: s.atomic_update(
        "t", "k", where=[{"field": "a..b", "operator": "equals", "value": 1}], mutations=BUMP
    ),
    "unclosed-index": lambda s: s.atomic_claim(
        "t", where=[{"field": "items[0", "operator": "exists"}]
    ),
    "control-character-in-path": lambda s: s.atomic_claim(
        "t", where=[{"field": "a\x00b", "operator": "exists"}]
    ),
    "bad-match": lambda s: s.atomic_update("t", "k", where=PENDING, match="most", mutations=BUMP),
    "unknown-operation": lambda s: s.atomic_update(
        "t", "k", mutations=[{"field": "n", "operation": "multiply", "value": 2}]
    ),
    "increment-by-text": lambda s: s.atomic_update(
        "t", "k", mutations=[{"field": "n", "operation": "increment", "value": "1"}]
    ),
    "claim-limit-zero": lambda s: s.atomic_claim("t", where=PENDING, limit=0),
    "claim-limit-too-big": lambda s: s.atomic_claim("t", where=PENDING, limit=1001),
    "claim-order-by-value-field": lambda s: s.atomic_claim("t", order_by="priority"),
    "claim-bad-direction": lambda s: s.atomic_claim("t", direction="up"),
    "upsert-bad-mutation-path": lambda s: s.atomic_upsert(
        "t", "k", insert_value={}, mutations=[{"field": "", "operation": "set", "value": 1}]
    ),
    "query-bad-where": lambda s: s.query("t", where=[{"field": "a", "value": 1}]),
}


@pytest.mark.parametrize("call", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_spec_fails_before_any_io(
    unreachable_url: str, call: Callable[[AtomicStore], Any]
) -> None:
    with AtomicStore(unreachable_url) as store, pytest.raises(SpecError) as raised:
        call(store)
    assert raised.value.field
    assert raised.value.problem


def test_unreachable_store_fails_only_once_the_spec_is_valid(unreachable_url: str) -> None:
    with AtomicStore(unreachable_url) as store, pytest.raises(AtomicStoreError) as raised:
        store.atomic_update("t", "k", where=PENDING, mutations=BUMP)
    assert not isinstance(raised.value, SpecError)


@pytest.mark.parametrize("call", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_spec_leaves_a_live_store_unchanged(
    store: AtomicStore, call: Callable[[AtomicStore], Any]
) -> None:
    store.put("t", "k", {"status": "pending", "n": 1})
    with pytest.raises(SpecError):
        call(store)
    assert store.get("t", "k") == {"status": "pending", "n": 1}
