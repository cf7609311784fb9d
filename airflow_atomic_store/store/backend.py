"""What the store needs from a backend: one method per primitive.

Backends receive parsed, validated specs; they never see raw user input, so
everything they raise is about the database, not the spec.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from contextlib import AbstractContextManager
from operator import itemgetter
from typing import Any, Protocol

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec import Condition, Mutation, Ordering
from airflow_atomic_store.store.claim_sets import ChosenSet, SetStorage
from airflow_atomic_store.store.receipts import Receipt
from airflow_atomic_store.store.snapshot import Snapshot

Row = tuple[str, dict[str, Any]]

DEFAULT_STORAGE_TABLE = "atomic_store_rows"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
#: How the store names what it creates beside a storage table ``t``: ``t_tables``,
#: ``t_claim_sets``, ``t_receipts``, ``t_receipts_pkey``, ``t_created_idx``, ``t_set_<hash>``.
RESERVED_ENDINGS = "_tables, _claim_sets, _receipts, _pkey, _idx, _set_<10 hex digits>"
_RESERVED = re.compile(r"(_tables|_claim_sets|_receipts|_pkey|_idx|_set_[0-9a-f]{10})\Z")

_COLUMN_THEN_KEY = itemgetter(2, 0)


def decoded(rows: Sequence[tuple[str, str]]) -> list[Row]:
    """``(key, JSON text)`` rows with their values decoded, in one ``json.loads``.

    Every stored value is one JSON document, so a batch joined into one array
    decodes to the same values, in one call instead of one per row (a driver's
    JSON loader decodes each value on its own).
    """
    if len(rows) < 2:
        return [(key, json.loads(value)) for key, value in rows]
    values = json.loads("[" + ",".join([value for _, value in rows]) + "]")
    return [(row[0], value) for row, value in zip(rows, values, strict=True)]


def in_claim_order(rows: Sequence[tuple[str, str, Any]], ordering: Ordering) -> list[Row]:
    """``(key, value text, order column)`` rows as decoded ``(key, value)`` in claim order.

    ``RETURNING`` gives no order, so it is restored here as ``order_sql``
    orders: keys are unique in a table, so ``(column, key)`` is a total order, and
    Python compares ``str`` by code point, which is SQLite's ``BINARY`` order and
    PostgreSQL's ``"C"`` order on UTF-8 text (a keyed PostgreSQL claim's receipt
    records its rows in this same order, in SQL).
    """
    ordered = sorted(rows, key=_COLUMN_THEN_KEY, reverse=ordering.direction == "desc")
    return decoded([(key, value) for key, value, _ in ordered])


def counted(row: Sequence[Any] | None) -> tuple[int, str | None]:
    """A count statement's result row (``count_query``) as ``(count, first key)``."""
    return (int(row[0]), row[1]) if row else (0, None)


class ClaimSetGone(Exception):
    """A claim named a set's index that another process has dropped; claim again without it."""


def check_storage_table(name: str) -> str:
    """The physical table name becomes an identifier (and index names), so keep it plain."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise SpecError(
            "storage_table",
            f"must be a plain SQL identifier (letters, digits, _; at most 48), got {name!r}",
        )
    if _RESERVED.search(name):
        raise SpecError(
            "storage_table",
            f"must not end like the store's own tables and indexes ({RESERVED_ENDINGS}: "
            f"another storage table's would take that name), got {name!r}",
        )
    return name


def is_set_index(storage_table: str, name: str) -> bool:
    """Whether ``name`` is a set index of this storage table, not of one whose name extends it.

    A storage table may be named ``q_set_jobs``: a prefix test alone would let
    a store on ``q`` drop that table's own indexes.
    """
    return re.fullmatch(re.escape(storage_table) + r"_set_[0-9a-f]{10}", name) is not None


class Backend(SetStorage, Protocol):
    def put(self, table: str, key: str, value: dict[str, Any]) -> None: ...

    def get(self, table: str, key: str) -> dict[str, Any] | None: ...

    def delete(self, table: str, key: str) -> bool: ...

    def query(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
    ) -> list[Row]: ...

    def count(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        claim_set: ChosenSet | None = None,
    ) -> tuple[int, str | None]:
        """How many rows match, counting at most ``limit``, and the first one's key.

        The first in ``ordering`` (a claim's order): a trigger tells by it that the
        head of a queue was consumed even when the count stayed the same. Takes no
        lock: a row counted here may be claimed by someone else next. May raise
        :class:`ClaimSetGone`.
        """
        ...

    def count_query(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        claim_set: ChosenSet | None = None,
    ) -> tuple[bytes | str, list[Any]]:
        """:meth:`count`'s statement and parameters, to run on another connection."""
        ...

    def update(
        self,
        table: str,
        key: str,
        where: Sequence[Condition],
        match: str,
        mutations: Sequence[Mutation],
        receipt: Receipt | None = None,
    ) -> tuple[dict[str, Any] | None, bool]:
        """``(new value, replayed)``: None when the row is missing or the guard failed.

        With a ``receipt`` the effect applies at most once per key; a repeat applies
        nothing and returns the recorded value with ``replayed`` True.
        """
        ...

    def claim(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        mutations: Sequence[Mutation],
        claim_set: ChosenSet | None = None,
        receipt: Receipt | None = None,
    ) -> tuple[list[Row], bool]:
        """``(claimed rows' new values in claim order, replayed)``.

        May raise :class:`ClaimSetGone`.
        """
        ...

    def upsert(
        self,
        table: str,
        key: str,
        insert_value: dict[str, Any],
        mutations: Sequence[Mutation],
        receipt: Receipt | None = None,
    ) -> tuple[tuple[bool, dict[str, Any]], bool]:
        """``((inserted, resulting value), replayed)``."""
        ...

    def written_query(self, table: str) -> tuple[bytes | str, list[Any]] | None:
        """A statement returning a row once something wrote ``table``, to run on another
        connection; None when :meth:`count_query` needs no catalog read for it (the
        table's id is known, or the backend has no catalog)."""
        ...

    def notify_channel(self, table: str) -> str | None:
        """The channel that writes to ``table`` notify; None where writes notify nothing."""
        ...

    def purge_receipts(self, limit: int) -> int:
        """Remove up to ``limit`` expired receipts; how many went."""
        ...

    def explain_claim(
        self,
        table: str,
        where: Sequence[Condition],
        match: str,
        ordering: Ordering,
        limit: int,
        claim_set: ChosenSet | None = None,
        *,
        generic: bool = False,
    ) -> str:
        """The database's plan for the claim's row selection."""
        ...

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """Read-only inspection queries over one consistent view (``store/snapshot.py``)."""
        ...

    def close(self) -> None: ...
