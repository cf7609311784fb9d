"""A long-lived process never writes into, or reads from, another table after a reset.

PostgreSQL rows carry their logical table's id, and a process looks each name's id
up once and keeps it. The ids used to come from an identity column: after
``TRUNCATE … RESTART IDENTITY`` (or a drop) of the store's tables, another process's
first new table was given id 1 again, and a process still holding ``orders`` = 1
put its rows into ``payroll`` and read ``payroll``'s row as its own. Ids now come
from a sequence that neither statement resets (tables_catalog.sql).
"""

from __future__ import annotations

import psycopg
import pytest

from airflow_atomic_store import AtomicStore
from tests.support.long_lived_store import long_lived_store

STORAGE = "atomic_store_rows"
RESETS = {
    "truncate_restart_identity": (
        f"TRUNCATE {STORAGE}, {STORAGE}_tables, {STORAGE}_claim_sets, {STORAGE}_receipts "
        "RESTART IDENTITY"
    ),
    "drop": (f"DROP TABLE {STORAGE}, {STORAGE}_tables, {STORAGE}_claim_sets, {STORAGE}_receipts"),
}

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.parametrize("backend", ["postgres"], indirect=True),
]


@pytest.mark.parametrize("reset", sorted(RESETS))
def test_a_process_holding_table_ids_never_crosses_into_a_table_made_after_a_reset(
    store_url: str, reset: str
) -> None:
    with long_lived_store(store_url) as orders_writer:
        assert orders_writer.call("put", "orders", "o1", {"of": "orders"}) == ("ok", None)
        with psycopg.connect(store_url, autocommit=True) as admin:
            admin.execute(RESETS[reset])
        with AtomicStore(store_url) as other:  # another process makes a new table
            other.put("payroll", "p1", {"of": "payroll", "salary": 1})

        assert orders_writer.call("get", "orders", "p1") == ("ok", None)
        orders_writer.call("put", "orders", "o2", {"of": "orders"})

        with AtomicStore(store_url) as other:
            payroll = other.query("payroll", limit=100)
            assert [(row["key"], row["value"]["of"]) for row in payroll] == [("p1", "payroll")]
