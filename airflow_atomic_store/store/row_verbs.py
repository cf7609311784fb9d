"""A store's plain verbs: put, get, delete and query whole rows."""

from __future__ import annotations

from typing import Any

from airflow_atomic_store.spec import (
    QUERY_LIMIT,
    check_object,
    parse_key,
    parse_limit,
    parse_match,
    parse_ordering,
    parse_table,
    parse_where,
)
from airflow_atomic_store.store.backend import Backend
from airflow_atomic_store.store.claim_sets import ClaimSetCatalog
from airflow_atomic_store.store.requests import Selection


class RowVerbs:
    """The :class:`~airflow_atomic_store.AtomicStore` verbs that read or write whole rows."""

    def __init__(self, backend: Backend, claim_sets: ClaimSetCatalog) -> None:
        self._backend = backend
        self._claim_sets = claim_sets

    def put(self, table: str, key: str, value: dict[str, Any]) -> None:
        """Create or replace a row; a replaced row keeps its place in FIFO order."""
        self._backend.put(parse_table(table), parse_key(key), check_object(value, "value"))

    def get(self, table: str, key: str) -> dict[str, Any] | None:
        return self._backend.get(parse_table(table), parse_key(key))

    def delete(self, table: str, key: str) -> bool:
        return self._backend.delete(parse_table(table), parse_key(key))

    def query(
        self,
        table: str,
        where: Any = None,
        match: str = "all",
        order_by: str = "createdAt",
        direction: str = "asc",
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        table = parse_table(table)
        conditions, mode = parse_where(where), parse_match(match)
        ordering = parse_ordering(order_by, direction)
        count = parse_limit(limit, QUERY_LIMIT)
        if ordering.column == "record_timestamp":
            self._claim_sets.ensure_record_order()
        rows = self._backend.query(Selection(table, conditions, mode, ordering, count))
        return [{"key": key, "value": value} for key, value in rows]
