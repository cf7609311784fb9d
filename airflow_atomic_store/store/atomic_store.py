"""``AtomicStore``: every verb of the store, in one class over one driver.

Each verb parses and validates its arguments with the spec layer first, so a bad
spec raises :class:`SpecError` before any I/O (the connection is opened lazily on
the first valid call). Then the store's policy is decided once, here: which
claimable set serves a claim (the store keeps the catalog of declared sets), the
idempotency receipt a keyed call records, a retry without a set whose index
another process dropped. Then one request goes to the driver (``store/contract.py``),
which runs one statement and answers one typed result, shaped here into the
verb's result dict. procrastinate's ``JobManager(connector)`` is the model.
"""

from __future__ import annotations

import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from functools import lru_cache
from types import TracebackType
from typing import Any

from airflow_atomic_store import timestamps
from airflow_atomic_store.exceptions import AtomicStoreError, SpecError
from airflow_atomic_store.spec import (
    CLAIM_LIMIT,
    QUERY_LIMIT,
    Condition,
    Mutation,
    check_object,
    check_text,
    parse_key,
    parse_limit,
    parse_match,
    parse_mutations,
    parse_ordering,
    parse_path,
    parse_return_fields,
    parse_table,
    parse_where,
    project,
)
from airflow_atomic_store.spec.claim_sets import ClaimSet, covered_conditions, parse_claim_set
from airflow_atomic_store.spec.memo import Memo
from airflow_atomic_store.spec.options import (
    ClaimMode,
    OrderColumn,
    keys_target,
    parse_claim_mode,
    parse_keys,
    parse_upsert_items,
)
from airflow_atomic_store.store import retention
from airflow_atomic_store.store.contract import (
    DEFAULT_STORAGE_TABLE,
    Backend,
    ChosenSet,
    Claimed,
    ClaimRequest,
    ClaimSetGone,
    Receipt,
    Selection,
    Snapshot,
    StoredSet,
    UpdatedMany,
    UpdateManyRequest,
    UpdateRequest,
    UpsertedMany,
    UpsertManyRequest,
    UpsertRequest,
    Use,
)
from airflow_atomic_store.store.notify import DEFAULT_NOTIFY, Notifications, parse_notify

#: Long enough to outlive Airflow's retry windows many times over (retries with
#: exponential back-off, a task cleared and re-run the next day).
DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600.0
#: A century: a receipt's expiry must stay a timestamp both databases and Python hold.
MAX_RETENTION_SECONDS = 100 * 365 * 24 * 3600.0
#: Expired receipts one purge removes, and how many keyed calls pass between purges.
PURGE_BATCH = 500
PURGE_EVERY = 100
MAX_KEY_BYTES = 1024
#: How often (seconds) a process lists the store's sets again when a claim's filter
#: has none: a set another process declares serves this one's claims within this.
REFRESH_SECONDS = 10.0
#: Claim filters whose serving set a process remembers (a store has a few).
MAX_REMEMBERED_CHOICES = 256

#: Per backend: the options it cannot honour, each with what to use instead (a dropped
#: ``lock_timeout`` would let a SQLite store wait for ever where its author asked for 5 s).
UNSUPPORTED_OPTIONS: Mapping[str, Mapping[str, str]] = {
    "SQLite": {
        "lock_timeout": "use busy_timeout (seconds a writer waits for the database lock)",
        "statement_timeout": (
            "SQLite cannot cancel a running statement; use busy_timeout to bound lock waits"
        ),
        "notify": "SQLite has no notifications; its triggers poll (set their poll_interval)",
    },
    "PostgreSQL": {
        "busy_timeout": (
            "use lock_timeout (seconds a statement waits for a row lock) or statement_timeout"
        ),
    },
}


class AtomicStore:
    """Three atomic primitives plus plain get/put/delete/query over one table.

    :param url: ``sqlite:////abs/path.db`` (embedded, one machine) or
        ``postgresql://user:pass@host:port/db`` (production, many workers).
    :param storage_table: the physical table holding every logical table.
    :param lock_timeout: PostgreSQL only: seconds a statement may wait for a
        row lock before failing with a retryable error (default: wait).
    :param statement_timeout: PostgreSQL only: seconds before a statement is
        cancelled with a retryable error (default: no limit).
    :param busy_timeout: SQLite only: seconds a writer waits for the lock.

    An option the URL's backend cannot honour (``lock_timeout`` on SQLite,
    ``busy_timeout`` on PostgreSQL…) is a :class:`SpecError` naming the option
    to use there instead.
    :param auto_claim_sets: deprecated, and ignored: the store no longer builds
        claimable sets from a claim. A queue's ``status equals pending`` set is
        created with the schema; declare any other with :meth:`ensure_claim_index`.
    :param receipt_retention: seconds an idempotency receipt is kept (default 7
        days); within it, a call repeated with the same key replays its result.
    :param notify: PostgreSQL only: which writes ``pg_notify`` their table's channel
        in the same statement, so that a ``ClaimableRowsTrigger`` wakes at once:
        ``"writes"`` (put, update, upsert; the default), ``"all"`` (claims too) or
        ``"off"`` (triggers then rely on their poll). See docs/backends.md.
        None (not given) is ``"writes"``.
    :param read_only: open an existing store only to read it, as inspection does
        (:class:`~airflow_atomic_store.inspection.StoreInspector`, the command line,
        the UI page): nothing is created or changed (no SQLite file, directory,
        journal mode or schema; no PostgreSQL DDL) and the database refuses every
        write. Where no store is, the first call raises :class:`ConnectionConfigError`.
    """

    def __init__(
        self,
        url: str,
        *,
        storage_table: str = DEFAULT_STORAGE_TABLE,
        lock_timeout: float | None = None,
        statement_timeout: float | None = None,
        busy_timeout: float | None = None,
        auto_claim_sets: bool | None = None,
        receipt_retention: float = DEFAULT_RETENTION_SECONDS,
        notify: str | None = None,
        read_only: bool = False,
    ) -> None:
        options = {
            "storage_table": storage_table,
            "lock_timeout": lock_timeout,
            "statement_timeout": statement_timeout,
            "busy_timeout": busy_timeout,
            "notify": notify,
            "read_only": _flag(read_only, "read_only"),
        }
        self._use(open_backend(url, options), auto_claim_sets, receipt_retention)

    def _use(self, backend: Backend, auto_claim_sets: object, receipt_retention: float) -> None:
        if auto_claim_sets is not None:
            _flag(auto_claim_sets, "auto_claim_sets")
            warnings.warn(
                "auto_claim_sets is deprecated and has no effect: claims no longer build "
                "claimable sets; the queue's pending set comes with the schema, declare "
                "others with ensure_claim_index()",
                DeprecationWarning,
                stacklevel=3,
            )
        self._receipt_retention = parse_retention(receipt_retention)
        self._keyed_calls = 0
        self._backend = backend
        #: The store's claimable sets as this process last listed them, and which set
        #: serves each claim filter seen since (``_serving``).
        self._sets: list[StoredSet] = []
        self._listed_at = float("-inf")
        self._choices: dict[tuple[int, str, str], tuple[Sequence[Condition], ChosenSet | None]]
        self._choices = {}

    @classmethod
    def from_connection_factory(
        cls,
        dialect: str,
        connect: Callable[[], Any],
        *,
        storage_table: str = DEFAULT_STORAGE_TABLE,
        lock_timeout: float | None = None,
        statement_timeout: float | None = None,
        auto_claim_sets: bool | None = None,
        receipt_retention: float = DEFAULT_RETENTION_SECONDS,
        secrets: Sequence[str] = (),
        notify: str | None = None,
        read_only: bool = False,
    ) -> AtomicStore:
        """A PostgreSQL store whose connections come from ``connect()``.

        This is how the Airflow hook reuses the Postgres provider's connection
        handling (SSL and other extras) instead of re-parsing connection URLs.
        ``secrets`` (the connection's password) never appear in an error message;
        ``read_only`` is the constructor's.
        """
        if dialect not in ("postgresql", "postgres"):
            raise SpecError("dialect", f"connection factories are for PostgreSQL, got {dialect!r}")
        options = {
            "storage_table": storage_table,
            "lock_timeout": lock_timeout,
            "statement_timeout": statement_timeout,
            "notify": notify,
            "read_only": _flag(read_only, "read_only"),
        }
        store = cls.__new__(cls)
        backend = _postgres_driver(connect, tuple(secrets), options)
        store._use(backend, auto_claim_sets, receipt_retention)
        return store

    # -- atomic primitives ------------------------------------------------------------

    def atomic_update(
        self,
        table: str,
        key: str,
        *,
        where: Any = None,
        match: str = "all",
        mutations: Any,
        return_fields: Sequence[str] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Compare-and-set one row: apply ``mutations`` only if ``where`` holds.

        Never creates the row. A missing row or a failed guard gives
        ``updated: False, value: None``. With ``idempotency_key`` the call
        applies at most once per key.
        """
        table, key = parse_table(table), parse_key(key)
        conditions, mode = parse_where(where), parse_match(match)
        parsed = _required_mutations(mutations, "mutations")
        fields = parse_return_fields(return_fields)
        receipt = self._receipt(idempotency_key, "update", table, key)
        updated = self._backend.update(UpdateRequest(table, key, conditions, mode, parsed, receipt))
        value = updated.value
        result = {"updated": value is not None, "value": project(value, fields), "key": key}
        return _with_replayed(result, receipt, updated.replayed)

    def atomic_claim(
        self,
        table: str,
        *,
        where: Any = None,
        match: str = "all",
        mutations: Any = None,
        order_by: str = "createdAt",
        direction: str = "asc",
        limit: int = 10,
        return_fields: Sequence[str] | None = None,
        execution_id: str | None = None,
        idempotency_key: str | None = None,
        mode: str = "mark",
    ) -> dict[str, Any]:
        """Claim up to ``limit`` rows matching ``where``, marking them in the same step.

        Two concurrent claims never return the same row. With ``mutations``
        None the rows get ``status: in_flight``, ``claimedAt: now`` and
        ``claimedBy: execution_id`` (a fresh unique id when none is given).
        With ``idempotency_key`` a repeated call claims nothing more and returns
        the batch the first call claimed.

        ``mode="delete"`` removes the claimed rows in the same statement and returns
        their last values: at-most-once (a task that dies after the claim has lost
        its batch; docs/reference/python-api.md says when to choose it). It takes no
        ``mutations``. Mark- and delete-claims on one table never both get a row.
        """
        table, conditions, match_mode, ordering, count, fields = _claim_options(
            (table, where, match, order_by, direction, limit, return_fields), "claim"
        )
        claim_mode = parse_claim_mode(mode)
        parsed = _claim_mutations(claim_mode, mutations, execution_id)
        use: Use = "delete-claim" if claim_mode == "delete" else "claim"
        receipt = self._receipt(idempotency_key, use, table, "")
        selection = Selection(table, conditions, match_mode, ordering, count)
        result = self._claim(selection, parsed, receipt, claim_mode)
        claimed: list[dict[str, Any]]
        if fields is None:
            claimed = [{"key": key, "value": value} for key, value in result.rows]
        else:
            claimed = [{"key": key, "value": project(value, fields)} for key, value in result.rows]
        output = {"claimed": claimed, "count": len(claimed)}
        return _with_replayed(output, receipt, result.replayed)

    def atomic_upsert(
        self,
        table: str,
        key: str,
        *,
        insert_value: dict[str, Any],
        mutations: Any = (),
        return_fields: Sequence[str] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Insert ``insert_value`` if the row is absent, else apply ``mutations``.

        No mutations is seed-if-missing: the existing row is left alone and
        returned. ``inserted`` tells which branch fired. With
        ``idempotency_key`` a repeated call returns the first call's result
        (``inserted`` included) and applies nothing.
        """
        table, key = parse_table(table), parse_key(key)
        value = check_object(insert_value, "insert_value")
        parsed = parse_mutations(mutations)
        fields = parse_return_fields(return_fields)
        receipt = self._receipt(idempotency_key, "upsert", table, key)
        upserted = self._backend.upsert(UpsertRequest(table, key, value, parsed, receipt))
        result = {
            "inserted": upserted.inserted,
            "value": project(upserted.value, fields),
            "key": key,
        }
        return _with_replayed(result, receipt, upserted.replayed)

    # -- many rows per call (issue 42): one statement (PostgreSQL) or transaction (SQLite) --

    def atomic_upsert_many(
        self,
        table: str,
        items: Sequence[Any],
        *,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Upsert many rows in one step: ``atomic_upsert`` for each item, all or nothing.

        ``items``: up to 10,000 of ``{"key", "insert_value"[, "mutations"]}`` (or
        ``(key, insert_value[, mutations])``), keys distinct. An absent row gets its
        ``insert_value``; a present one its item's ``mutations``, or nothing (the default:
        seed-if-missing, so a producer that enqueues the same items again adds none
        twice). The rows of one call get ``createdAt`` in the order given, so a queue
        takes them FIFO. Every item is checked before any I/O: one bad item fails the
        call, naming it, and nothing is written; a mutation that cannot apply to its row
        fails the call the same way.

        Returns ``{"items": [{"key", "inserted"}, …], "inserted": n}`` in the items'
        order (``n``: how many were inserted). With ``idempotency_key`` a repeated call
        (the same keys) applies nothing and returns the first call's result,
        ``replayed: True``.
        """
        table = parse_table(table)
        parsed = parse_upsert_items(items)
        keys = [item.key for item in parsed]
        target = "" if idempotency_key is None else keys_target(keys)
        receipt = self._receipt(idempotency_key, "upsert_many", table, target)
        done = UpsertedMany(frozenset())
        if parsed:
            done = self._backend.upsert_many(UpsertManyRequest(table, parsed, receipt))
        result = {
            "items": [{"key": key, "inserted": key in done.inserted} for key in keys],
            "inserted": len(done.inserted),
        }
        return _with_replayed(result, receipt, done.replayed)

    def atomic_update_many(
        self,
        table: str,
        keys: Sequence[str],
        *,
        where: Any = None,
        match: str = "all",
        mutations: Any,
        idempotency_key: str | None = None,
        archive_table: str | None = None,
    ) -> dict[str, Any]:
        """Compare-and-set many rows in one step: the same ``mutations`` on each of ``keys``
        whose row exists and satisfies ``where``, each row judged on its own.

        What finishes a claimed batch: ``where=[{"field": "claimedBy", "operator":
        "equals", "value": me}]`` applies to the rows this run still holds and leaves the
        ones another run took over. Never creates a row. Up to 10,000 distinct keys; a
        mutation that cannot apply to one row fails the call and nothing is written.
        With ``archive_table`` the rows it applies to move there, with their new value,
        in the same statement (pgmq's ``archive``; a row of the same key there is
        replaced).

        Returns ``{"items": [{"key", "updated"}, …], "updated": n}`` in the keys' order.
        With ``idempotency_key`` a repeated call applies nothing and returns the first
        call's result, ``replayed: True``.
        """
        table = parse_table(table)
        parsed_keys = parse_keys(keys)
        conditions, mode = parse_where(where), parse_match(match)
        parsed = _required_mutations(mutations, "mutations")
        archive = None if archive_table is None else parse_table(archive_table, "archive_table")
        if archive == table:
            raise SpecError("archive_table", "must not be the table being updated")
        target = "" if idempotency_key is None else keys_target(parsed_keys)
        receipt = self._receipt(idempotency_key, "update_many", table, target)
        done = UpdatedMany(frozenset())
        if parsed_keys:
            request = UpdateManyRequest(
                table, parsed_keys, conditions, mode, parsed, receipt, archive
            )
            done = self._backend.update_many(request)
        result = {
            "items": [{"key": key, "updated": key in done.updated} for key in parsed_keys],
            "updated": len(done.updated),
        }
        return _with_replayed(result, receipt, done.replayed)

    # -- whole rows -------------------------------------------------------------------

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
        rows = self._backend.query(Selection(table, conditions, mode, ordering, count))
        return [{"key": key, "value": value} for key, value in rows]

    # -- queues: counts, claimable sets, plans, retention -----------------------------

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
        selection = self.watch_selection(
            table, where, match, at_most=at_most, order_by=order_by, direction=direction
        )
        try:
            backlog = self._backend.count(selection)
        except ClaimSetGone:
            self._forget_sets()
            backlog = self._backend.count(_without_set(selection))
        return {"count": backlog.count, "first": backlog.first}

    # -- waiting: what deferred waits ask of a store (issue 40; docs/waiting.md) ------

    def watch_selection(
        self,
        table: str,
        where: Any = None,
        match: str = "all",
        *,
        at_most: int = 1000,
        order_by: str = "createdAt",
        direction: str = "asc",
    ) -> Selection:
        """The rows :meth:`backlog` counts, parsed, with the claimable set that serves them.

        A waiter's shared count compiles it once and runs it on the notifications'
        reader (:meth:`notifications`, ``Notifications.count_query``); reading the
        sets' catalog is why it may block.
        """
        table = parse_table(table)
        conditions, mode = parse_where(where), parse_match(match)
        cap = parse_limit(at_most, QUERY_LIMIT, field="at_most")
        ordering = parse_ordering(order_by, direction)
        chosen = self._serving(conditions, mode, ordering.column)
        return Selection(table, conditions, mode, ordering, cap, chosen)

    def get_many(self, table: str, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The values of those of ``keys`` that exist in ``table``, read in one statement.

        What the waiters of one table's rows share at each poll, instead of one
        ``get`` each.
        """
        table = parse_table(table)
        if isinstance(keys, str) or not isinstance(keys, Sequence):
            raise SpecError("keys", f"must be a list of keys, got {keys!r}")
        return self._backend.get_many(table, sorted({parse_key(key) for key in keys}))

    def notifications(self) -> Notifications | None:
        """The driver's notifications capability (River's ``GetListener``), or None where
        writes do not announce themselves (SQLite: its waiters poll). See ``store/notify.py``."""
        return self._backend.notifications()

    def ensure_claim_index(
        self,
        *,
        table: str,
        where: Any,
        match: str = "all",
        order_by: str = "createdAt",
    ) -> str:
        """Declare a claimable set: the rows that a queue's claims on ``table`` take from.

        A claim marks rows in place, so a queue's table keeps every row it ever
        consumed. The store builds a partial index holding only the rows that
        match ``where`` (e.g. ``status equals pending``, which every store has from
        its schema), by table and in ``order_by`` order, and every claim whose filter
        includes these conditions walks that index instead of the table's history.
        The set is the filter's: it serves every table whose claims use it, ``table``
        too. Conditions are ``equals``, ``not_equals``, ``in``, ``not_in``, ``exists``
        or ``not_exists`` on strings, integers, booleans or null. Idempotent and safe
        from many processes; on PostgreSQL built ``CONCURRENTLY`` (writers are never
        blocked) and by the table's owner only. Run it at deployment (a setup task,
        ``airflow atomic-store``): claims never build a set. Returns the index name;
        :meth:`claim_sets` lists the sets.
        """
        parse_table(table)
        claim_set = parse_claim_set(where, match, order_by)
        self._refuse_a_colliding_name(claim_set)
        built = self._backend.build_claim_set(claim_set)
        self._forget_sets()
        return built.name

    def _refuse_a_colliding_name(self, claim_set: ClaimSet) -> None:
        """Names keep 40 bits of hash: a set whose name another set holds is refused
        (``IF NOT EXISTS`` would silently leave it unbuilt)."""
        name = claim_set.index_name(self._backend.storage_table)
        for held in self._backend.load_claim_sets():
            if held.name == name and held.claim_set.identity != claim_set.identity:
                raise AtomicStoreError(
                    f"claimable set {claim_set.identity} would be named {name}, which set "
                    f"{held.claim_set.identity} holds (40 bits of hash collided); drop that "
                    "set or declare this filter with its conditions in another form"
                )

    def claim_sets(self, table: str | None = None) -> list[dict[str, Any]]:
        """Every claimable set: name, where, origin, state (sets serve every table, so
        ``table`` is only checked).

        ``origin`` is ``declared`` (:meth:`ensure_claim_index`, or the schema's
        pending set) or ``automatic`` (built by a claim before 0.1.0); ``state`` is
        ``ready``, ``building`` or ``failed`` (with the ``problem``).
        """
        if table is not None:
            parse_table(table)
        return [entry.to_json() for entry in self._backend.load_claim_sets()]

    def drop_claim_set(self, name: str) -> bool:
        """Drop a claimable set and its index; True if it existed. Claims stay correct."""
        if not isinstance(name, str) or not name:
            raise SpecError("name", f"must be a claimable set's index name, got {name!r}")
        dropped = self._backend.drop_claim_set(name)
        self._forget_sets()
        return dropped

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
        chosen = self._serving(conditions, mode, ordering.column)
        selection = Selection(table, conditions, mode, ordering, count, chosen)
        try:
            return self._backend.explain_claim(selection, generic=generic)
        except ClaimSetGone:
            self._forget_sets()
            return self._backend.explain_claim(_without_set(selection), generic=generic)

    def retire(
        self,
        table: str,
        *,
        older_than: float | timedelta,
        statuses: Sequence[str] = ("done",),
        finished_field: str = "finishedAt",
        limit: int = 500,
        time_budget: float | timedelta = 30.0,
        archive_table: str | None = None,
    ) -> dict[str, Any]:
        """Retire finished rows: ``status`` in ``statuses`` and ``finished_field`` (a
        canonical timestamp the queue writes when it finishes a row) older than
        ``older_than`` (seconds or a timedelta), in delete-claims of at most ``limit``
        rows, for at most ``time_budget``. Never a ``pending`` or ``in_flight`` row; it
        skips rows other claims hold and never waits for them. With ``archive_table``
        each batch is copied there (replacing rows of the same key) by the statement
        that deletes it. Returns ``{"retired": n, "batches": b, "complete": bool,
        "stopped": why}``: ``stopped`` is ``"done"`` (nothing retirable is left;
        ``complete`` True), ``"time_budget"`` (the budget ran out first) or ``"held"``
        (the rest are rows other transactions hold, which a batch steps past instead of
        waiting; PostgreSQL). Either way the next run goes on.
        """
        plan = retention.plan_retention(
            table, older_than, statuses, finished_field, limit, time_budget, archive_table
        )
        return plan.run(self._retire_batch, self._retirable_left)

    def _retire_batch(self, plan: retention.RetentionPlan) -> int:
        return len(self._claim(plan.selection, (), None, "delete", plan.archive_table).rows)

    def _retirable_left(self, plan: retention.RetentionPlan) -> int:
        """Whether retirable rows are still there after a short batch: rows others hold.

        Only where claims step past held rows; elsewhere (SQLite) a short batch saw
        every row, and the check cost a retire that found little 1.3-1.7x its time.
        """
        if not self._backend.skips_held_rows:
            return 0
        selection = Selection(plan.table, plan.where, "all", retention.FIFO, 1)
        chosen = self._serving(selection.where, selection.match, selection.ordering.column)
        try:
            return self._backend.count(_served(selection, chosen)).count
        except ClaimSetGone:
            self._forget_sets()
            return self._backend.count(selection).count

    # -- idempotency receipts, inspection, lifecycle ----------------------------------

    @property
    def receipt_retention(self) -> float:
        """Seconds a receipt is kept: after that its idempotency key is new again."""
        return self._receipt_retention

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """One read-only, consistent view for :class:`~airflow_atomic_store.inspection.StoreInspector`.

        Nothing in it writes: no claimable set, no receipt, no row.
        """
        return self._backend.snapshot()

    def migrate(self) -> dict[str, Any]:
        """Bring the store's schema to this release's version now, and say what was done.

        Any first call does the same; this is for deployments whose workers may not
        alter the store's tables: the owner migrates once (``airflow atomic-store
        migrate`` calls this). Returns ``storage_table``, ``version_before`` (None:
        the store was created now), ``version`` and the steps ``applied``.
        Raises :class:`~airflow_atomic_store.exceptions.SchemaVersionError` for a
        store newer than this release, or one this role may not migrate.
        """
        return self._backend.migrate().to_dict()

    def close(self) -> None:
        self._backend.close()

    def __enter__(self) -> AtomicStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- the store's policy, decided before the driver is called ----------------------

    def _receipt(
        self, idempotency_key: str | None, primitive: Use, table: str, target: str
    ) -> Receipt | None:
        """The receipt a keyed call records; every so often, expired receipts go first
        (a bounded batch: receipts expire without a daemon)."""
        if idempotency_key is None:
            return None
        key = parse_idempotency_key(idempotency_key)
        if self._keyed_calls % PURGE_EVERY == 0:
            self._backend.purge_receipts(PURGE_BATCH)
        self._keyed_calls += 1
        return Receipt(key, primitive, table, target, self._receipt_retention)

    def _claim(
        self,
        selection: Selection,
        mutations: Sequence[Mutation],
        receipt: Receipt | None,
        mode: ClaimMode,
        archive_table: str | None = None,
    ) -> Claimed:
        """Claim through the set that serves the selection; a set whose index another
        process dropped meanwhile is forgotten, and the claim runs again without it."""
        chosen = self._serving(selection.where, selection.match, selection.ordering.column)
        served = _served(selection, chosen)
        try:
            return self._backend.claim(
                ClaimRequest(served, mutations, receipt, mode, archive_table)
            )
        except ClaimSetGone:
            self._forget_sets()
            return self._backend.claim(
                ClaimRequest(selection, mutations, receipt, mode, archive_table)
            )

    def _serving(
        self, conditions: Sequence[Condition], match: str, column: OrderColumn
    ) -> ChosenSet | None:
        """The best ready set for a filter: the one covering most of its conditions,
        then the one in its order. Remembered per parsed filter (an equal spec parses
        to the same object, ``spec/memo.py``) until the sets are listed again; with
        no set, the sets are listed again at most every ``REFRESH_SECONDS``."""
        if not conditions:
            return None
        key = (id(conditions), match, column)
        known = self._choices.get(key)
        fresh = time.monotonic() - self._listed_at < REFRESH_SECONDS
        if known is not None and known[0] is conditions and (known[1] is not None or fresh):
            return known[1]
        if not fresh:
            self._sets = self._backend.load_claim_sets()
            self._listed_at = time.monotonic()
            self._choices.clear()
        chosen = _best(self._sets, conditions, match, column)
        if len(self._choices) >= MAX_REMEMBERED_CHOICES:
            self._choices.clear()
        self._choices[key] = (conditions, chosen)
        return chosen

    def _forget_sets(self) -> None:
        """List the sets afresh at the next claim (one was declared or dropped)."""
        self._listed_at = float("-inf")
        self._choices.clear()


def _best(
    sets: Sequence[StoredSet], conditions: Sequence[Condition], match: str, column: OrderColumn
) -> ChosenSet | None:
    best: tuple[tuple[int, bool], ChosenSet] | None = None
    for stored in sets:
        if stored.state != "ready":
            continue
        inline = covered_conditions(stored.claim_set, conditions, match)
        if inline is None:
            continue
        rank = (len(inline), stored.claim_set.column == column)
        if best is None or rank > best[0]:
            claim_set = stored.claim_set
            predicate = claim_set.conditions if claim_set.disjunctive else None
            best = (rank, ChosenSet(stored.name, inline, predicate))
    return None if best is None else best[1]


def _served(selection: Selection, chosen: ChosenSet | None) -> Selection:
    """The selection through ``chosen`` (built directly: a claim makes one per call)."""
    if chosen is None:
        return selection
    where, match, ordering = selection.where, selection.match, selection.ordering
    return Selection(selection.table, where, match, ordering, selection.limit, chosen)


def _without_set(selection: Selection) -> Selection:
    """The same rows read without a set (its index was dropped meanwhile)."""
    return Selection(
        selection.table, selection.where, selection.match, selection.ordering, selection.limit
    )


# -- arguments ----------------------------------------------------------------------------


def _with_replayed(
    result: dict[str, Any], receipt: Receipt | None, replayed: bool
) -> dict[str, Any]:
    """Keyed calls say whether they applied (``replayed`` False) or replayed a receipt."""
    if receipt is not None:
        result["replayed"] = replayed
    return result


def _parse_claim_options(raw: tuple[Any, ...], *, field: str) -> tuple[Any, ...]:
    """``atomic_claim``'s options but the mutations, parsed in the order errors are reported."""
    table, where, match, order_by, direction, limit, return_fields = raw
    return (
        parse_table(table),
        parse_where(where),
        parse_match(match),
        parse_ordering(order_by, direction),
        parse_limit(limit, CLAIM_LIMIT),
        parse_return_fields(return_fields),
    )


#: A dispatcher claims with the same options on every call: parsed once (``spec/memo.py``).
_claim_options = Memo(_parse_claim_options)


def _required_mutations(mutations: Any, field: str) -> tuple[Mutation, ...]:
    parsed = parse_mutations(mutations, field=field)
    if not parsed:
        raise SpecError(field, "at least one mutation is required")
    return parsed


_CLAIM_PATHS = {name: parse_path(name, field=name) for name in ("status", "claimedAt", "claimedBy")}
_IN_FLIGHT = Mutation(_CLAIM_PATHS["status"], "set", "in_flight")


@lru_cache(maxsize=256)
def _claimed_by(execution_id: str) -> Mutation:
    return Mutation(_CLAIM_PATHS["claimedBy"], "set", execution_id)


def _claim_mutations(
    claim_mode: ClaimMode, mutations: Any, execution_id: Any
) -> tuple[Mutation, ...]:
    """A claim's mutations: none for a delete-claim; given ones; else the default claim
    mutation (status → in_flight, claimedAt → now, claimedBy → the execution id, a fresh
    unique one when none is given). Paths are parsed once: this runs on every claim."""
    if claim_mode == "delete":
        if mutations is not None:
            raise SpecError(
                "mutations", "a claim with mode 'delete' removes its rows and takes no mutations"
            )
        return ()
    if mutations is not None:
        return _required_mutations(mutations, "mutations")
    if execution_id is None:
        by = Mutation(_CLAIM_PATHS["claimedBy"], "set", f"claim-{uuid.uuid4()}")
    else:
        if not isinstance(execution_id, str) or not execution_id:
            raise SpecError("execution_id", f"must be a non-empty string, got {execution_id!r}")
        check_text(execution_id, "execution_id", "execution ids")
        by = _claimed_by(execution_id)
    return (_IN_FLIGHT, Mutation(_CLAIM_PATHS["claimedAt"], "set", timestamps.now()), by)


def parse_idempotency_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise SpecError("idempotency_key", f"must be a non-empty string, got {key!r}")
    check_text(key, "idempotency_key", "idempotency keys")
    if len(key.encode()) > MAX_KEY_BYTES:
        raise SpecError("idempotency_key", f"must be at most {MAX_KEY_BYTES} bytes in UTF-8")
    return key


def parse_retention(seconds: object) -> float:
    """Checked up front: an infinite or huge retention used to fail every keyed call."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not 0 < seconds <= MAX_RETENTION_SECONDS
    ):
        raise SpecError(
            "receipt_retention",
            f"must be a positive number of seconds, at most {MAX_RETENTION_SECONDS:.0f} "
            f"(a century), got {seconds!r}",
        )
    return float(seconds)


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(name, f"must be true or false, got {value!r}")
    return value


# -- opening: which driver a URL names ----------------------------------------------------


def check_options(backend: str, options: Mapping[str, Any]) -> None:
    """Refuse every option given (not None) that ``backend`` cannot honour."""
    for name, instead in UNSUPPORTED_OPTIONS[backend].items():
        if options.get(name) is not None:
            raise SpecError(name, f"the {backend} backend does not support {name}: {instead}")


def _sqlite(url: str, options: dict[str, Any]) -> Backend:
    from airflow_atomic_store.store.sqlite.driver import SqliteDriver, path_from_url

    check_options("SQLite", options)
    settings = {"storage_table": options["storage_table"]}
    if options.get("busy_timeout") is not None:
        settings["busy_timeout"] = options["busy_timeout"]
    return SqliteDriver(path_from_url(url), read_only=options["read_only"], **settings)


def _postgres(url: str, options: dict[str, Any]) -> Backend:
    import psycopg

    from airflow_atomic_store.store.postgres.connection import parse_postgres_url

    parsed = parse_postgres_url(url)
    secrets = () if parsed.password is None else (parsed.password,)
    return _postgres_driver(lambda: psycopg.connect(parsed.dsn), secrets, options)


def _postgres_driver(
    connect: Callable[[], Any], secrets: tuple[str, ...], options: dict[str, Any]
) -> Backend:
    from airflow_atomic_store.store.postgres.driver import PostgresDriver

    check_options("PostgreSQL", options)
    notify = DEFAULT_NOTIFY if options.get("notify") is None else options["notify"]
    return PostgresDriver(
        connect,
        storage_table=options["storage_table"],
        lock_timeout=options.get("lock_timeout"),
        statement_timeout=options.get("statement_timeout"),
        secrets=tuple(secret for secret in secrets if secret),
        notify=parse_notify(notify),
        read_only=options["read_only"],
    )


_DRIVERS: dict[str, Callable[[str, dict[str, Any]], Backend]] = {
    "sqlite": _sqlite,
    "postgresql": _postgres,
    "postgres": _postgres,
}


def open_backend(url: str, options: dict[str, Any]) -> Backend:
    """The driver ``url`` names, given the store's options (None: not given)."""
    scheme = url.split("://", 1)[0].split("+", 1)[0] if "://" in url else ""
    factory = _DRIVERS.get(scheme)
    if factory is None:
        raise SpecError(
            "url",
            f"unsupported store URL {redact_url(url)!r}; use sqlite:///… or postgresql://…",
        )
    if options.get("notify") is not None:
        parse_notify(options["notify"])  # a bad mode is named whichever the backend
    return factory(url, options)


def redact_url(url: str) -> str:
    """The URL with its password replaced by ``***`` (for messages): everything before
    the last ``@`` may be a password (``store/postgres/connection.py`` reads URLs)."""
    if "://" not in url or "@" not in url:
        return url
    scheme, tail = url.split("://", 1)
    # The last "@" anywhere: whatever precedes it may be a password, and is hidden.
    userinfo, _, rest = tail.rpartition("@")
    user, has_password, _ = userinfo.partition(":")
    return f"{scheme}://{user}:***@{rest}" if has_password else url
