"""The backend contract's values: what a verb asks a backend, and what it answers.

Every argument is parsed and validated before one of these is made
(``AtomicStore``), so a backend never sees raw user input. A new option of a
verb is a new field here, with a default: the signatures of the backends and
of their callers do not change (River's parameter structs are the model).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_atomic_store.spec import Condition, Mutation, Ordering
from airflow_atomic_store.spec.bulk import UpsertItem
from airflow_atomic_store.spec.options import ClaimMode
from airflow_atomic_store.store.claim_sets import ChosenSet
from airflow_atomic_store.store.receipts import Receipt

#: A stored row: its key and its (decoded) value.
Row = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Selection:
    """Rows of one logical table that match ``where``, in ``ordering``, at most ``limit``.

    What a claim takes, a trigger counts and ``explain_claim`` plans; with
    ``claim_set`` (the set that covers ``where``), through that set's index.
    """

    table: str
    where: Sequence[Condition]
    match: str
    ordering: Ordering
    limit: int
    claim_set: ChosenSet | None = None

    def without_set(self) -> Selection:
        """The same rows read without the set (its index was dropped meanwhile)."""
        return self.served_by(None)

    def served_by(self, claim_set: ChosenSet | None) -> Selection:
        """The same rows read through ``claim_set``'s index (built directly: a claim
        makes one per call, and ``dataclasses.replace`` cost it 5 µs of 100 on SQLite)."""
        return Selection(self.table, self.where, self.match, self.ordering, self.limit, claim_set)


@dataclass(frozen=True)
class UpdateRequest:
    """Compare-and-set one row: apply ``mutations`` if the row exists and ``where`` holds."""

    table: str
    key: str
    where: Sequence[Condition]
    match: str
    mutations: Sequence[Mutation]
    receipt: Receipt | None = None


@dataclass(frozen=True)
class ClaimRequest:
    """Take up to ``selection.limit`` rows no concurrent claim takes.

    ``mode`` ``mark`` applies ``mutations`` to them; ``delete`` removes them in the
    same statement (``mutations`` is empty) and answers their last values, and with
    ``archive_table`` also writes them there (replacing rows of the same key).
    """

    selection: Selection
    mutations: Sequence[Mutation]
    receipt: Receipt | None = None
    mode: ClaimMode = "mark"
    archive_table: str | None = None

    def of(self, selection: Selection) -> ClaimRequest:
        """The same claim of ``selection`` (see :meth:`Selection.served_by`)."""
        return ClaimRequest(selection, self.mutations, self.receipt, self.mode, self.archive_table)


@dataclass(frozen=True)
class UpsertRequest:
    """Insert ``insert_value`` if the row is absent, else apply ``mutations`` (none: seed)."""

    table: str
    key: str
    insert_value: dict[str, Any]
    mutations: Sequence[Mutation]
    receipt: Receipt | None = None


@dataclass(frozen=True)
class Updated:
    """The row's new value (None: missing row or failed guard); ``replayed``: from a receipt."""

    value: dict[str, Any] | None
    replayed: bool = False


@dataclass(frozen=True)
class Claimed:
    """The claimed rows' new values in claim order; ``replayed``: the first call's batch."""

    rows: list[Row]
    replayed: bool = False


@dataclass(frozen=True)
class Upserted:
    """Which branch fired and the resulting value; ``replayed``: the first call's result."""

    inserted: bool
    value: dict[str, Any]
    replayed: bool = False


@dataclass(frozen=True)
class Backlog:
    """How many rows a selection has (at most its limit), and the first one's key."""

    count: int
    first: str | None

    @classmethod
    def from_row(cls, row: Sequence[Any] | None) -> Backlog:
        """A count statement's result row: ``(count, first key)``."""
        return cls(int(row[0]), row[1]) if row else cls(0, None)


# -- many rows per call (issue 42): ``atomic_upsert_many`` and ``atomic_update_many`` --------


@dataclass(frozen=True)
class UpsertManyRequest:
    """Insert each item's ``insert_value`` where its row is absent, else apply its
    ``mutations`` (none: leave the row as it is), all in one statement or transaction."""

    table: str
    items: Sequence[UpsertItem]
    receipt: Receipt | None = None


@dataclass(frozen=True)
class UpdateManyRequest:
    """Apply ``mutations`` to each of ``keys`` whose row exists and satisfies ``where`` (each
    row judged on its own); with ``archive_table`` the rows that applied move there."""

    table: str
    keys: Sequence[str]
    where: Sequence[Condition]
    match: str
    mutations: Sequence[Mutation]
    receipt: Receipt | None = None
    archive_table: str | None = None


@dataclass(frozen=True)
class UpsertedMany:
    """The keys whose rows were inserted (the others existed); ``replayed``: from a receipt."""

    inserted: frozenset[str]
    replayed: bool = False


@dataclass(frozen=True)
class UpdatedMany:
    """The keys whose rows the mutations applied to; ``replayed``: from a receipt."""

    updated: frozenset[str]
    replayed: bool = False
