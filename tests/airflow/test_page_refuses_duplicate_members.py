"""The page's filter refuses JSON text naming a member twice (tests/unit/test_json_text.py)."""

from __future__ import annotations

import html
from typing import Any

from airflow_atomic_store import AtomicStore
from tests.airflow.test_ui_page import PREFIX, QUEUE, _queue, _text_of, op, pytestmark

# The page's ``op`` fixture and marks (``api_app`` is tests/airflow/conftest.py's).
__all__ = ["op", "pytestmark"]


def test_a_filter_naming_a_member_twice_is_a_400_naming_it(
    op: Any, store: AtomicStore, store_conn: str
) -> None:
    _queue(store)
    where = '[{"field": "status", "operator": "equals", "field": "n", "value": "pending"}]'
    params = {"conn": store_conn, "table": QUEUE, "where": where}
    page = op.get(f"{PREFIX}/rows", params=params)
    assert page.status_code == 400
    assert "member 'field' appears twice" in html.unescape(_text_of(page.text, "error"))
    data = op.get(f"{PREFIX}/api/rows", params=params)
    assert data.status_code == 400 and "member 'field' appears twice" in data.json()["error"]
