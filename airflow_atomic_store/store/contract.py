"""The backend contract: what a verb asks a driver, what it answers, and the driver protocol.

Every argument is parsed and validated by :class:`~airflow_atomic_store.AtomicStore`
before one of these values is made, so a driver never sees raw user input and
everything it raises is about the database. A new option of a verb is a field
here, with a default: the drivers' signatures do not change (River's parameter
structs are the model). ``tests/conformance`` runs this contract against every
driver; a new backend is written against those tests.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from airflow_atomic_store.exceptions import IdempotencyKeyError, ResultTooLargeError, SpecError
from airflow_atomic_store.spec import Condition, Mutation, Ordering
from airflow_atomic_store.spec.claim_sets import ClaimSet, parse_claim_set
from airflow_atomic_store.spec.options import ClaimMode, UpsertItem
from airflow_atomic_store.store.migrations import Migrated
from airflow_atomic_store.store.notify import Notifications

DEFAULT_STORAGE_TABLE = "atomic_store_rows"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
#: How the store names what it creates beside a storage table ``t``: ``t_tables``,
#: ``t_claim_sets``, ``t_receipts``, ``t_migrations``, ``t_receipts_pkey``, ``t_created_idx``,
#: ``t_set_<hash>``.
RESERVED_ENDINGS = "_tables, _claim_sets, _receipts, _migrations, _pkey, _idx, _set_<10 hex digits>"
_RESERVED = re.compile(
    r"(_tables|_claim_sets|_receipts|_migrations|_pkey|_idx|_set_[0-9a-f]{10})\Z"
)

#: A stored row: its key and its (decoded) value.
Row = tuple[str, dict[str, Any]]

Primitive = Literal["update", "claim", "upsert", "upsert_many", "update_many"]
#: What a receipt records as its use: the primitive, and for a claim its mode. A
#: mark-claim records "claim"; a delete-claim records "delete-claim", so a key reused
#: across modes is refused: a replayed mark batch is still in the table (``in_flight``),
#: a replayed delete batch is gone from it. Text in the ``primitive`` column.
Use = Literal["update", "claim", "delete-claim", "upsert", "upsert_many", "update_many"]
#: The largest result a receipt records: PostgreSQL's limit on one ``jsonb`` value
#: (measured there as the ``jsonb``'s size, on SQLite as the UTF-8 JSON text's).
#: Read at each call, so a test can lower it.
MAX_RESULT_BYTES = 268_435_455


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


@dataclass(frozen=True)
class Receipt:
    """What a keyed call records: the key and the one use it may be replayed for.

    Written in the same transaction (PostgreSQL: the same statement) as the effect,
    so a call that applied has a receipt and one that did not has none.
    """

    key: str
    primitive: Use
    table: str
    target: str  # the row key; claims have none
    retention: float

    def check_result_size(self, size: int) -> None:
        """Refuse, before anything commits, a result too large to record."""
        if size > MAX_RESULT_BYTES:
            raise ResultTooLargeError(MAX_RESULT_BYTES, size)

    def check_reuse(self, primitive: str, table: str, target: str) -> None:
        """Raise unless a recorded use is this one: a key serves one primitive on one row."""
        if (primitive, table, target) != (self.primitive, self.table, self.target):
            raise IdempotencyKeyError(self.key, self.primitive, self.table, self.target)


@dataclass(frozen=True)
class ChosenSet:
    """The claimable set a selection runs through: its index and which conditions
    become literals (so the planner can prove the index predicate from the text).

    ``predicate`` is a disjunctive set's conditions in its index predicate's
    order. A claim through such a set is an ``any`` of the same conditions,
    perhaps in another order or repeated, and SQLite proves an ``OR`` predicate
    only from the same terms in the same order, so the claim writes the set's
    conditions in place of its own: the same filter. The name decides the set,
    so ``predicate`` takes no part in comparing (it holds unhashable values).
    A claim through the set writes ``predicate`` with all of it as literals, or
    else its own conditions with those at ``inline`` as literals.
    """

    name: str
    inline: frozenset[int]
    predicate: tuple[Condition, ...] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class StoredSet:
    """A claimable set as the store's catalog holds it.

    ``origin`` is ``declared`` (by the owner, or by the schema: the queue's pending
    set) or ``automatic`` (built by a claim before 0.1.0; still served and listed).
    """

    name: str
    claim_set: ClaimSet
    origin: str
    state: Literal["ready", "building", "failed"]
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            **self.claim_set.to_json(),
            "origin": self.origin,
            "state": self.state,
            "problem": self.problem,
        }


def stored_set(
    name: str, spec: dict[str, Any], origin: str, problem: str | None, index_ready: bool
) -> StoredSet:
    """A catalog row as a :class:`StoredSet`; its spec is validated again on the way in."""
    claim_set = parse_claim_set(spec["where"], spec["match"], spec["order_by"])
    state: Literal["ready", "building", "failed"] = (
        "failed" if problem else ("ready" if index_ready else "building")
    )
    return StoredSet(name, claim_set, origin, state, problem)


class ClaimSetGone(Exception):
    """A selection named a set's index that another process has dropped; ask again without it."""


@dataclass(frozen=True)
class Selection:
    """Rows of one logical table that match ``where``, in ``ordering``, at most ``limit``.

    What a claim takes, a trigger counts and ``explain_claim`` plans; with
    ``claim_set`` (the set that covers ``where``, chosen by the store), through
    that set's index.
    """

    table: str
    where: Sequence[Condition]
    match: str
    ordering: Ordering
    limit: int
    claim_set: ChosenSet | None = None


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


# -- inspection: read-only views over one consistent snapshot -------------------------


@dataclass(frozen=True)
class StoredRow:
    """One row as stored, with the timestamps the store keeps (aware, UTC)."""

    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Activity:
    """Counts per minute after a moment (minute 0 starts at it): a queue's arrivals and ends."""

    created: dict[int, int]
    finished: dict[int, int]


@dataclass(frozen=True)
class RowFilter:
    """Which rows of one logical table a snapshot query reads.

    ``where``/``match`` are parsed specs. The positions in ``inline`` are
    conditions the caller fixed (``status equals pending``), written as
    literals so that a claimable set's partial index can serve them.
    """

    table: str
    where: Sequence[Condition] = ()
    match: str = "all"
    inline: Collection[int] = ()


@dataclass(frozen=True)
class StoredReceipt:
    """An idempotency receipt as stored: the key, its one use, the result it replays
    (as the drivers record it: ``[value]``, ``[[key, value], …]``, ``[inserted, value]``),
    and when it was written (aware, UTC)."""

    key: str
    primitive: str
    table: str
    target: str
    result: Any
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class Claim:
    """An in-flight row's claim fields: each a string in the row, else None."""

    key: str
    claimed_at: str | None
    claimed_by: str | None


class Snapshot(Protocol):
    """Read-only queries over one consistent view of the store (rows as :class:`RowFilter`)."""

    def table_counts(self) -> list[tuple[str, int]]:
        """Every logical table and its row count."""
        ...

    def status_counts(self, table: str) -> list[tuple[str | None, int]]:
        """Rows per string ``status``; rows without one are counted under None."""
        ...

    def count(self, rows: RowFilter) -> int: ...

    def oldest_created(self, rows: RowFilter) -> datetime | None:
        """The earliest ``created_at`` among the matching rows."""
        ...

    def claims(self, rows: RowFilter, limit: int) -> list[Claim]:
        """Matching rows' claim fields, oldest ``claimedAt`` first (rows without one last)."""
        ...

    def rows(self, rows: RowFilter, limit: int, offset: int) -> list[StoredRow]:
        """Matching rows in queue order (``created_at``, then key)."""
        ...

    def activity(self, table: str, since: str, unfinished: Sequence[str]) -> Activity:
        """Rows with a string ``status`` per whole minute after ``since`` (canonical UTC):
        created then (``created_at``), and last written then with a status not in
        ``unfinished`` (``record_timestamp``)."""
        ...

    def receipts(self, key: str, limit: int) -> list[StoredReceipt]:
        """The receipts of ``key`` and of its steps (keys ``key/…``), oldest first: what
        one task instance's keyed calls recorded (``templating.task_instance_key``)."""
        ...


class SetStorage(Protocol):
    """What a driver does for claimable sets: store, build, list and drop them.

    Which set serves a claim is the store's decision (``AtomicStore``), made
    before the driver is called; sets are built only when declared (by the owner,
    or with the schema), never by a claim.
    """

    def load_claim_sets(self) -> list[StoredSet]:
        """Every set of the store, with its state."""
        ...

    def build_claim_set(self, claim_set: ClaimSet) -> StoredSet:
        """Record the set and build its index, waiting for it; raises when it fails."""
        ...

    def drop_claim_set(self, name: str) -> bool:
        """Drop a set's index and forget it; False when no such set (or index) exists."""
        ...


class Backend(SetStorage, Protocol):
    """The contract every driver meets; ``tests/conformance`` runs it against each.

    Each verb takes one request or at most three plain values and answers with a
    result value. ``Selection.claim_set`` names the set whose index serves the
    selection; a driver that finds that index gone raises :class:`ClaimSetGone`
    and the store asks again without it.
    """

    #: The physical table the driver's rows live in (validated), which names the rest.
    storage_table: str
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

    def upsert_many(self, request: UpsertManyRequest) -> UpsertedMany:
        """Every item upserted, or none (one statement or transaction); with a receipt,
        at most once per key, a repeat answering the recorded keys, ``replayed``."""
        ...

    def update_many(self, request: UpdateManyRequest) -> UpdatedMany:
        """Each key's row that exists and satisfies ``where`` gets the mutations (or moves
        to ``archive_table`` with them), all or none; rows locked in key order."""
        ...

    def explain_claim(self, selection: Selection, *, generic: bool = False) -> str:
        """The database's plan for the claim's row selection."""
        ...

    def purge_receipts(self, limit: int) -> int:
        """Remove up to ``limit`` expired receipts; how many went."""
        ...

    def notifications(self) -> Notifications | None:
        """The driver's write notifications, if its writes announce themselves (River's
        ``SupportsListener``: asked, not assumed)."""
        ...

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """Read-only inspection queries over one consistent view."""
        ...

    def migrate(self) -> Migrated:
        """Open now, bringing the schema to this release's version (``store/migrations.py``)."""
        ...

    def close(self) -> None: ...
