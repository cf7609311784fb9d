"""The deployed dispatcher benchmark's exactly-once check, read from the rows.

``e2e.dispatch_bench`` measures in the ``make e2e`` deployment, whose store is
PostgreSQL, and reads the rows with SQL (a recipe run may leave more rows than
the store's largest query returns), so this runs on PostgreSQL only.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_atomic_store import AtomicStore
from e2e.dispatch_bench import exactly_once

pytestmark = pytest.mark.postgres


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> Iterator[tuple[str, AtomicStore]]:
    server = request.getfixturevalue("postgres_server")
    url = server.create_user_schema("dispatch_bench_check")
    try:
        with AtomicStore(url) as store:
            for n in range(3):
                store.put("ops", f"op-{n}", {"status": "done"})
                store.put("effects", f"op-{n}", {"outcome": "done", "performedAt": "x"})
            yield url, store
    finally:
        server.drop_user_schema("dispatch_bench_check")


def test_every_item_done_with_one_done_effect_passes(queue: tuple[str, AtomicStore]) -> None:
    url, _ = queue
    assert exactly_once(url, "ops", "effects", 3) == {
        "ok": True,
        "statuses": {"done": 3},
        "outcomes": {"done": 3},
        "without_effect": 0,
    }


def test_an_item_not_done_an_effect_missing_or_a_count_off_fails(
    queue: tuple[str, AtomicStore],
) -> None:
    url, store = queue
    assert not exactly_once(url, "ops", "effects", 4)["ok"]
    store.put("ops", "op-1", {"status": "in_flight"})
    assert exactly_once(url, "ops", "effects", 3)["statuses"] == {"done": 2, "in_flight": 1}
    store.put("ops", "op-1", {"status": "done"})
    store.delete("effects", "op-2")
    found = exactly_once(url, "ops", "effects", 3)
    assert not found["ok"] and found["without_effect"] == 1
