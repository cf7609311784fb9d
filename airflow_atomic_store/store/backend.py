"""What the store needs from a backend: one method per verb, one request each.

Backends receive parsed, validated specs; they never see raw user input, so
everything they raise is about the database, not the spec.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from operator import itemgetter
from typing import Any, Protocol

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec import Ordering
from airflow_atomic_store.store.claim_sets import SetStorage
from airflow_atomic_store.store.migrations import Migrated
from airflow_atomic_store.store.notify import Notifications
from airflow_atomic_store.store.requests import (
    Backlog,
    Claimed,
    ClaimRequest,
    Row,
    Selection,
    Updated,
    UpdatedMany,
    UpdateManyRequest,
    UpdateRequest,
    Upserted,
    UpsertedMany,
    UpsertManyRequest,
    UpsertRequest,
)
from airflow_atomic_store.store.snapshot import Snapshot

DEFAULT_STORAGE_TABLE = "atomic_store_rows"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
#: How the store names what it creates beside a storage table ``t``: ``t_tables``,
#: ``t_claim_sets``, ``t_receipts``, ``t_migrations``, ``t_receipts_pkey``, ``t_created_idx``,
#: ``t_set_<hash>``.
RESERVED_ENDINGS = "_tables, _claim_sets, _receipts, _migrations, _pkey, _idx, _set_<10 hex digits>"
_RESERVED = re.compile(
    r"(_tables|_claim_sets|_receipts|_migrations|_pkey|_idx|_set_[0-9a-f]{10})\Z"
)

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
    """The contract every backend meets; ``tests/conformance`` runs it against each.

    Each verb takes one request (``requests.py``) or at most three plain values
    and answers with a result value: a new option is a field, not a signature.
    ``Selection.claim_set`` names the claimable set whose index serves the
    selection; a backend that finds its index gone raises :class:`ClaimSetGone`
    and the caller asks again without it.
    """

    #: Whether a claim steps past rows other transactions hold (PostgreSQL's ``SKIP
    #: LOCKED``) instead of waiting for them (SQLite: one writer at a time). Where it
    #: does, a short batch does not mean nothing matching is left (``retention.py``).
    skips_held_rows: bool

    def put(self, table: str, key: str, value: dict[str, Any]) -> None:
        """Create or replace a row; a replaced row keeps its ``created_at``."""
        ...

    def get(self, table: str, key: str) -> dict[str, Any] | None: ...

    def get_many(self, table: str, keys: Collection[str]) -> dict[str, dict[str, Any]]:
        """The values of those of ``keys`` that exist, in one statement (waiters' reads)."""
        ...

    def delete(self, table: str, key: str) -> bool: ...

    def query(self, selection: Selection) -> list[Row]:
        """The selection's rows, in its order (no claimable set: a read of any filter)."""
        ...

    def count(self, selection: Selection) -> Backlog:
        """How many rows match (at most ``limit``) and the first one's key, in the
        selection's order: a trigger tells by it that the head of a queue was consumed
        even when the count stayed the same. Takes no lock."""
        ...

    def update(self, request: UpdateRequest) -> Updated:
        """With a receipt the effect applies at most once per key; a repeat applies
        nothing and answers the recorded value, ``replayed``."""
        ...

    def claim(self, request: ClaimRequest) -> Claimed:
        """The claimed rows' new values in claim order; no row to two concurrent claims."""
        ...

    def upsert(self, request: UpsertRequest) -> Upserted: ...

    def explain_claim(self, selection: Selection, *, generic: bool = False) -> str:
        """The database's plan for the claim's row selection."""
        ...

    def purge_receipts(self, limit: int) -> int:
        """Remove up to ``limit`` expired receipts; how many went."""
        ...

    def notifications(self) -> Notifications | None:
        """The backend's write notifications, if its writes announce themselves."""
        ...

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """Read-only inspection queries over one consistent view (``store/snapshot.py``)."""
        ...

    def migrate(self) -> Migrated:
        """Open now, bringing the schema to this release's version (``store/migrations.py``)."""
        ...

    def close(self) -> None: ...

    # -- many rows per call (issue 42) ----------------------------------------------------

    def upsert_many(self, request: UpsertManyRequest) -> UpsertedMany:
        """Every item upserted, or none (one statement or transaction); with a receipt,
        at most once per key, a repeat answering the recorded keys, ``replayed``."""
        ...

    def update_many(self, request: UpdateManyRequest) -> UpdatedMany:
        """Each key's row that exists and satisfies ``where`` gets the mutations (or moves
        to ``archive_table`` with them), all or none; rows locked in key order."""
        ...
