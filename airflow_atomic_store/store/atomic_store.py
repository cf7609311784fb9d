"""``AtomicStore``: parse and validate, run one atomic statement, shape the result.

Every argument is parsed by the spec layer before the backend is touched,
so a bad spec raises :class:`SpecError` before any I/O (the connection is
opened lazily on the first valid call).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec import (
    check_object,
    parse_key,
    parse_match,
    parse_mutations,
    parse_return_fields,
    parse_table,
    parse_where,
    project,
)
from airflow_atomic_store.spec.bulk import keys_target, parse_keys, parse_upsert_items
from airflow_atomic_store.spec.options import parse_claim_mode
from airflow_atomic_store.store.arguments import (
    claim_mutations,
    claim_options,
    required_mutations,
    with_replayed,
)
from airflow_atomic_store.store.backend import DEFAULT_STORAGE_TABLE, Backend
from airflow_atomic_store.store.claim_sets import ClaimSetCatalog
from airflow_atomic_store.store.claiming import Claims
from airflow_atomic_store.store.delegation import delegated
from airflow_atomic_store.store.notify import Notifications
from airflow_atomic_store.store.opening import open_backend, open_factory_backend
from airflow_atomic_store.store.queue_views import QueueViews
from airflow_atomic_store.store.receipts import (
    DEFAULT_RETENTION_SECONDS,
    PURGE_BATCH,
    PURGE_EVERY,
    Receipt,
    Use,
    parse_idempotency_key,
    parse_retention,
)
from airflow_atomic_store.store.requests import (
    ClaimRequest,
    Selection,
    UpdateManyRequest,
    UpdateRequest,
    UpsertManyRequest,
    UpsertRequest,
)
from airflow_atomic_store.store.retention import Retention
from airflow_atomic_store.store.row_verbs import RowVerbs
from airflow_atomic_store.store.snapshot import Snapshot


def _rows(store: AtomicStore) -> RowVerbs:
    return store._rows


def _queues(store: AtomicStore) -> QueueViews:
    return store._queues


def _retention(store: AtomicStore) -> Retention:
    return store._retention


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
    :param auto_claim_sets: let the store declare a claimable set (a partial
        index holding only the matching rows) the first time it serves a claim
        whose ``equals``/``in`` conditions are on fields the claim itself sets
        (a queue's ``status``), so queues do not slow down as their history
        grows (see :meth:`ensure_claim_index` and docs/backends.md).
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
        journal mode or schema; no PostgreSQL DDL, no layout conversion) and the
        database refuses every write. Where no store is, the first call raises
        :class:`ConnectionConfigError`.
    """

    def __init__(
        self,
        url: str,
        *,
        storage_table: str = DEFAULT_STORAGE_TABLE,
        lock_timeout: float | None = None,
        statement_timeout: float | None = None,
        busy_timeout: float | None = None,
        auto_claim_sets: bool = True,
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

    def _use(self, backend: Backend, auto_claim_sets: bool, receipt_retention: float) -> None:
        _flag(auto_claim_sets, "auto_claim_sets")
        self._receipt_retention = parse_retention(receipt_retention)
        self._keyed_calls = 0
        self._backend = backend
        self._claim_sets = ClaimSetCatalog(backend, automatic=auto_claim_sets)
        self._rows = RowVerbs(backend, self._claim_sets)
        self._queues = QueueViews(backend, self._claim_sets)
        self._claims = Claims(backend, self._claim_sets)
        self._retention = Retention(self._claims)

    @classmethod
    def from_connection_factory(
        cls,
        dialect: str,
        connect: Callable[[], Any],
        *,
        storage_table: str = DEFAULT_STORAGE_TABLE,
        lock_timeout: float | None = None,
        statement_timeout: float | None = None,
        auto_claim_sets: bool = True,
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
        options = {
            "storage_table": storage_table,
            "lock_timeout": lock_timeout,
            "statement_timeout": statement_timeout,
            "notify": notify,
            "read_only": _flag(read_only, "read_only"),
        }
        store = cls.__new__(cls)
        backend = open_factory_backend(dialect, connect, tuple(secrets), options)
        store._use(backend, auto_claim_sets, receipt_retention)
        return store

    # -- atomic primitives ---------------------------------------------------

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
        applies at most once per key (see ``store/receipts.py``).
        """
        table, key = parse_table(table), parse_key(key)
        conditions, mode = parse_where(where), parse_match(match)
        parsed = required_mutations(mutations, "mutations")
        fields = parse_return_fields(return_fields)
        receipt = self._receipt(idempotency_key, "update", table, key)
        updated = self._backend.update(UpdateRequest(table, key, conditions, mode, parsed, receipt))
        value = updated.value
        result = {"updated": value is not None, "value": project(value, fields), "key": key}
        return with_replayed(result, receipt, updated.replayed)

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
        table, conditions, match_mode, ordering, count, fields = claim_options(
            (table, where, match, order_by, direction, limit, return_fields), "claim"
        )
        claim_mode = parse_claim_mode(mode)
        parsed, written = claim_mutations(claim_mode, mutations, execution_id, conditions)
        use: Use = "delete-claim" if claim_mode == "delete" else "claim"
        receipt = self._receipt(idempotency_key, use, table, "")
        selection = Selection(table, conditions, match_mode, ordering, count)
        result = self._claims.run(ClaimRequest(selection, parsed, receipt, claim_mode), written)
        claimed: list[dict[str, Any]]
        if fields is None:
            claimed = [{"key": key, "value": value} for key, value in result.rows]
        else:
            claimed = [{"key": key, "value": project(value, fields)} for key, value in result.rows]
        output = {"claimed": claimed, "count": len(claimed)}
        return with_replayed(output, receipt, result.replayed)

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
        return with_replayed(result, receipt, upserted.replayed)

    # -- whole rows and queue views: declared by the objects that hold them ---

    put = delegated(RowVerbs.put, _rows, "AtomicStore")
    get = delegated(RowVerbs.get, _rows, "AtomicStore")
    delete = delegated(RowVerbs.delete, _rows, "AtomicStore")
    query = delegated(RowVerbs.query, _rows, "AtomicStore")
    count = delegated(QueueViews.count, _queues, "AtomicStore")
    backlog = delegated(QueueViews.backlog, _queues, "AtomicStore")
    ensure_claim_index = delegated(QueueViews.ensure_claim_index, _queues, "AtomicStore")
    claim_sets = delegated(QueueViews.claim_sets, _queues, "AtomicStore")
    drop_claim_set = delegated(QueueViews.drop_claim_set, _queues, "AtomicStore")
    explain_claim = delegated(QueueViews.explain_claim, _queues, "AtomicStore")
    retire = delegated(Retention.retire, _retention, "AtomicStore")

    # -- waiting: what deferred waits ask of a store (h40; docs/waiting.md) ----

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
        reader (:meth:`notifications`); reading the sets' catalog is why it may block.
        """
        return self._queues.backlog_selection(
            table, where, match, at_most=at_most, order_by=order_by, direction=direction
        )

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
        """The backend's notifications capability, or None where writes do not announce
        themselves (SQLite: its waiters poll). See ``store/notify.py``."""
        return self._backend.notifications()

    # -- idempotency receipts ------------------------------------------------

    @property
    def receipt_retention(self) -> float:
        """Seconds a receipt is kept: after that its idempotency key is new again."""
        return self._receipt_retention

    def _receipt(
        self, idempotency_key: str | None, primitive: Use, table: str, target: str
    ) -> Receipt | None:
        """The receipt a keyed call records; every so often, expired receipts go first."""
        if idempotency_key is None:
            return None
        key = parse_idempotency_key(idempotency_key)
        if self._keyed_calls % PURGE_EVERY == 0:
            self._backend.purge_receipts(PURGE_BATCH)
        self._keyed_calls += 1
        return Receipt(key, primitive, table, target, self._receipt_retention)

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """One read-only, consistent view for :class:`~airflow_atomic_store.inspection.StoreInspector`.

        Nothing in it writes: no claimable set, no receipt, no row.
        """
        return self._backend.snapshot()

    # -- lifecycle -----------------------------------------------------------

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
        if parsed:
            done = self._backend.upsert_many(UpsertManyRequest(table, parsed, receipt))
            inserted, replayed = done.inserted, done.replayed
        else:
            inserted, replayed = frozenset(), False
        result = {
            "items": [{"key": key, "inserted": key in inserted} for key in keys],
            "inserted": len(inserted),
        }
        return with_replayed(result, receipt, replayed)

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
        parsed = required_mutations(mutations, "mutations")
        archive = None if archive_table is None else parse_table(archive_table)
        if archive == table:
            raise SpecError("archive_table", "must not be the table being updated")
        target = "" if idempotency_key is None else keys_target(parsed_keys)
        receipt = self._receipt(idempotency_key, "update_many", table, target)
        if parsed_keys:
            request = UpdateManyRequest(
                table, parsed_keys, conditions, mode, parsed, receipt, archive
            )
            done = self._backend.update_many(request)
            updated, replayed = done.updated, done.replayed
        else:
            updated, replayed = frozenset(), False
        result = {
            "items": [{"key": key, "updated": key in updated} for key in parsed_keys],
            "updated": len(updated),
        }
        return with_replayed(result, receipt, replayed)


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(name, f"must be true or false, got {value!r}")
    return value
