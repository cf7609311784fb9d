"""A store's queue views: capped counts, claimable sets and claim plans.

They read through the claimable set a claim with the same filter would use,
and never claim or write a row (declaring a set builds an index, nothing more).
"""

from __future__ import annotations

from typing import Any

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec import (
    CLAIM_LIMIT,
    QUERY_LIMIT,
    parse_limit,
    parse_match,
    parse_ordering,
    parse_table,
    parse_where,
)
from airflow_atomic_store.spec.claim_sets import parse_claim_set
from airflow_atomic_store.store.backend import Backend, ClaimSetGone
from airflow_atomic_store.store.claim_sets import ClaimSetCatalog
from airflow_atomic_store.store.requests import Selection


class QueueViews:
    """The :class:`~airflow_atomic_store.AtomicStore` verbs that look at a queue."""

    def __init__(self, backend: Backend, claim_sets: ClaimSetCatalog) -> None:
        self._backend = backend
        self._claim_sets = claim_sets

    def count(
        self,
        table: str,
        where: Any = None,
        match: str = "all",
        *,
        at_most: int = 1000,
    ) -> int:
        """How many rows of ``table`` match ``where``, counting at most ``at_most``.

        What a trigger asks before waking a dispatcher ("is there work?"): capped, so
        it never walks a whole queue, and through the claimable set that a claim
        with the same filter would use, so it skips the rows already consumed.
        Nothing is locked or claimed.
        """
        return int(self.backlog(table, where, match, at_most=at_most)["count"])

    def backlog(
        self,
        table: str,
        where: Any = None,
        match: str = "all",
        *,
        at_most: int = 1000,
        order_by: str = "createdAt",
        direction: str = "asc",
    ) -> dict[str, Any]:
        """``{"count": n, "first": key}``: :meth:`count`, and the key a claim in this order takes next.

        ``first`` is None when nothing matches. A trigger remembers it when it
        fires: once that row no longer matches, a claim has taken it, even if as
        many rows arrived meanwhile and the count did not move.
        """
        selection = self.backlog_selection(
            table, where, match, at_most=at_most, order_by=order_by, direction=direction
        )
        try:
            backlog = self._backend.count(selection)
        except ClaimSetGone:
            self._claim_sets.forget(selection.table)
            backlog = self._backend.count(selection.without_set())
        return {"count": backlog.count, "first": backlog.first}

    def backlog_selection(
        self,
        table: str,
        where: Any = None,
        match: str = "all",
        *,
        at_most: int = 1000,
        order_by: str = "createdAt",
        direction: str = "asc",
    ) -> Selection:
        """:meth:`backlog`'s parsed arguments and the claimable set that serves its filter.

        A PostgreSQL trigger compiles it (``Notifications.count_query``) to count on
        the connection it ``LISTEN``s on.
        """
        table = parse_table(table)
        conditions, mode = parse_where(where), parse_match(match)
        cap = parse_limit(at_most, QUERY_LIMIT, field="at_most")
        ordering = parse_ordering(order_by, direction)
        chosen = self._claim_sets.for_claim(
            table, conditions, mode, ordering.column, may_declare=False
        )
        return Selection(table, conditions, mode, ordering, cap, chosen)

    def ensure_claim_index(
        self,
        *,
        table: str,
        where: Any,
        match: str = "all",
        order_by: str = "createdAt",
    ) -> str:
        """Declare a claimable set: the rows of ``table`` that a queue's claims take from.

        A claim marks rows in place, so a queue's table keeps every row it ever
        consumed. The store builds a partial index holding only the rows that
        match ``where`` (e.g. ``status equals pending``), in ``order_by`` order,
        and every claim whose filter includes these conditions walks that index
        instead of the table's history. Conditions are ``equals``,
        ``not_equals``, ``in``, ``not_in``, ``exists`` or ``not_exists`` on
        strings, integers, booleans or null. Idempotent and safe from many
        processes; on PostgreSQL built ``CONCURRENTLY``, so writers are never
        blocked. Returns the index name; :meth:`claim_sets` lists the sets.
        """
        claim_set = parse_claim_set(parse_table(table), where, match, order_by)
        return self._claim_sets.declare(claim_set).name

    def claim_sets(self, table: str | None = None) -> list[dict[str, Any]]:
        """Every claimable set (of one table, or all): name, where, origin and state.

        ``origin`` is ``declared`` (:meth:`ensure_claim_index`) or ``automatic``
        (the store's own, see ``auto_claim_sets``); ``state`` is ``ready``,
        ``building`` or ``failed`` (with the ``problem``).
        """
        stored = self._claim_sets.listing(None if table is None else parse_table(table))
        return [entry.to_json() for entry in stored]

    def drop_claim_set(self, name: str) -> bool:
        """Drop a claimable set and its index; True if it existed. Claims stay correct."""
        if not isinstance(name, str) or not name:
            raise SpecError("name", f"must be a claimable set's index name, got {name!r}")
        return self._claim_sets.drop(name)

    def explain_claim(
        self,
        table: str,
        *,
        where: Any = None,
        match: str = "all",
        order_by: str = "createdAt",
        direction: str = "asc",
        limit: int = 10,
        generic: bool = False,
    ) -> str:
        """The database's query plan for a claim's row selection (nothing is claimed).

        The statement is the one the claim would run now, claimable set
        included, so the plan shows whether it walks the set's index. With
        ``generic`` (PostgreSQL), the plan a repeated claim settles on, made
        without the parameters' values.
        """
        table = parse_table(table)
        conditions, mode = parse_where(where), parse_match(match)
        ordering = parse_ordering(order_by, direction)
        count = parse_limit(limit, CLAIM_LIMIT)
        chosen = self._claim_sets.for_claim(
            table, conditions, mode, ordering.column, may_declare=False
        )
        selection = Selection(table, conditions, mode, ordering, count, chosen)
        try:
            return self._backend.explain_claim(selection, generic=generic)
        except ClaimSetGone:
            self._claim_sets.forget(table)
            return self._backend.explain_claim(selection.without_set(), generic=generic)
