"""docs/backends.md's "Physical layout" names everything a store creates, on both backends.

DESIGN.md: whatever the store builds in a user's database is documented. A store is
exercised until it has built every kind of object (a claimable set, the
``recordTimestamp`` index, a receipt), then each table, index, sequence and function
found in its schema or file must be named in that section, with the storage table
written ``<t>`` and a set's hash ``<hash>``.
"""

from __future__ import annotations

import re
from pathlib import Path

from airflow_atomic_store import AtomicStore
from tests.support.physical import PHYSICAL_TABLE, store_objects
from tests.support.specs import INCREMENT, PENDING

DOCS = Path(__file__).resolve().parents[2] / "docs" / "backends.md"
_SET_INDEX = re.compile(rf"^{PHYSICAL_TABLE}_set_[0-9a-f]+$")


def layout_section() -> str:
    text = DOCS.read_text(encoding="utf-8")
    start = text.index("## Physical layout")
    return text[start : text.index("\n## ", start + 1)]


def documented_name(name: str) -> str:
    """An object's name as the section writes it."""
    if _SET_INDEX.match(name):
        return "<t>_set_<hash>"
    return name.replace(PHYSICAL_TABLE, "<t>")


def functions(url: str) -> list[str]:
    """The functions in the store's PostgreSQL schema (SQLite stores none)."""
    if url.startswith("sqlite:///"):
        return []
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT proname FROM pg_proc WHERE pronamespace = "
            "(SELECT oid FROM pg_namespace WHERE nspname = current_schema())"
        ).fetchall()
    return sorted(name for (name,) in rows)


def test_every_object_a_store_creates_is_named_in_the_physical_layout_section(
    store: AtomicStore, store_url: str
) -> None:
    store.put("jobs", "a", {"status": "pending", "n": 0})
    store.atomic_claim("jobs", where=PENDING, limit=1)  # declares the queue's set
    store.atomic_update("jobs", "a", mutations=INCREMENT, idempotency_key="once")
    store.query("jobs", order_by="recordTimestamp")  # builds the recordTimestamp index
    found = store_objects(store_url) or []
    assert any(_SET_INDEX.match(name) for name in found), found
    section = layout_section()
    missing = [
        name
        for name in [*found, *functions(store_url)]
        if f"`{documented_name(name)}`" not in section
    ]
    assert missing == []
