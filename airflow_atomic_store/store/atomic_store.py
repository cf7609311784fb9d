"""``AtomicStore``: parse and validate, run one atomic statement, shape the result.

Every argument is parsed by the spec layer before the backend is touched,
so a bad spec raises :class:`SpecError` before any I/O (the connection is
opened lazily on the first valid call).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from functools import lru_cache
from types import TracebackType
from typing import Any

from airflow_atomic_store import timestamps
from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec import (
    CLAIM_LIMIT,
    QUERY_LIMIT,
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
from airflow_atomic_store.spec.claim_sets import parse_claim_set
from airflow_atomic_store.spec.memo import Memo
from airflow_atomic_store.store.backend import DEFAULT_STORAGE_TABLE, Backend, ClaimSetGone
from airflow_atomic_store.store.claim_sets import ClaimSetCatalog
from airflow_atomic_store.store.notify import DEFAULT_NOTIFY, parse_notify
from airflow_atomic_store.store.receipts import (
    DEFAULT_RETENTION_SECONDS,
    PURGE_BATCH,
    PURGE_EVERY,
    Primitive,
    Receipt,
    parse_idempotency_key,
    parse_retention,
)
from airflow_atomic_store.store.snapshot import Snapshot
from airflow_atomic_store.store.urls import parse_postgres_url, redact_url

_BACKENDS: dict[str, Callable[..., Backend]] = {}


def _sqlite(url: str, **options: Any) -> Backend:
    from airflow_atomic_store.store.sqlite.backend import SqliteBackend, path_from_url

    options.pop("lock_timeout", None)
    options.pop("statement_timeout", None)
    options.pop("notify", None)  # SQLite has no notifications: its triggers poll
    return SqliteBackend(path_from_url(url), **options)


def _postgres(url: str, **options: Any) -> Backend:
    import psycopg

    from airflow_atomic_store.store.postgres.backend import PostgresBackend

    options.pop("busy_timeout", None)
    parsed = parse_postgres_url(url)
    secrets = () if parsed.password is None else (parsed.password,)
    return PostgresBackend(lambda: psycopg.connect(parsed.dsn), secrets=secrets, **options)


_BACKENDS.update({"sqlite": _sqlite, "postgresql": _postgres, "postgres": _postgres})


_CLAIM_PATHS = {name: parse_path(name, field=name) for name in ("status", "claimedAt", "claimedBy")}
_IN_FLIGHT = Mutation(_CLAIM_PATHS["status"], "set", "in_flight")
#: The fields the default mutations write (the automatic claimable set's test).
_DEFAULT_WRITTEN = frozenset(_CLAIM_PATHS)


@lru_cache(maxsize=256)
def _claimed_by(execution_id: str) -> Mutation:
    return Mutation(_CLAIM_PATHS["claimedBy"], "set", execution_id)


def default_claim_mutations(execution_id: str, *, reused_id: bool = False) -> tuple[Mutation, ...]:
    """status → in_flight, claimedAt → now, claimedBy → the execution id.

    Built on paths parsed once: this runs on every claim, and re-parsing three
    fixed mutations was most of a claim's Python time (docs/benchmarks.md);
    only ``claimedAt`` is new per call, and with ``reused_id`` (an id the
    caller passes on every call) the ``claimedBy`` mutation is remembered.
    The caller has validated ``execution_id`` (a non-empty, storable string).
    """
    by = (
        _claimed_by(execution_id)
        if reused_id
        else Mutation(_CLAIM_PATHS["claimedBy"], "set", execution_id)
    )
    return (_IN_FLIGHT, Mutation(_CLAIM_PATHS["claimedAt"], "set", timestamps.now()), by)


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
        notify: str = DEFAULT_NOTIFY,
    ) -> None:
        scheme = url.split("://", 1)[0].split("+", 1)[0] if "://" in url else ""
        factory = _BACKENDS.get(scheme)
        if factory is None:
            raise SpecError(
                "url",
                f"unsupported store URL {redact_url(url)!r}; use sqlite:///… or postgresql://…",
            )
        options: dict[str, Any] = {
            "storage_table": storage_table,
            "lock_timeout": lock_timeout,
            "statement_timeout": statement_timeout,
            "notify": parse_notify(notify),
        }
        if busy_timeout is not None:
            options["busy_timeout"] = busy_timeout
        self._use(factory(url, **options), auto_claim_sets, receipt_retention)

    def _use(self, backend: Backend, auto_claim_sets: bool, receipt_retention: float) -> None:
        if not isinstance(auto_claim_sets, bool):
            raise SpecError("auto_claim_sets", f"must be true or false, got {auto_claim_sets!r}")
        self._receipt_retention = parse_retention(receipt_retention)
        self._keyed_calls = 0
        self._backend = backend
        self._claim_sets = ClaimSetCatalog(backend, automatic=auto_claim_sets)

    @classmethod
    def from_backend(
        cls,
        backend: Backend,
        *,
        auto_claim_sets: bool = True,
        receipt_retention: float = DEFAULT_RETENTION_SECONDS,
    ) -> AtomicStore:
        store = cls.__new__(cls)
        store._use(backend, auto_claim_sets, receipt_retention)
        return store

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
        notify: str = DEFAULT_NOTIFY,
    ) -> AtomicStore:
        """A PostgreSQL store whose connections come from ``connect()``.

        This is how the Airflow hook reuses the Postgres provider's connection
        handling (SSL and other extras) instead of re-parsing connection URLs.
        ``secrets`` (the connection's password) never appear in an error message.
        """
        if dialect not in ("postgresql", "postgres"):
            raise SpecError("dialect", f"connection factories are for PostgreSQL, got {dialect!r}")
        from airflow_atomic_store.store.postgres.backend import PostgresBackend

        return cls.from_backend(
            PostgresBackend(
                connect,
                storage_table=storage_table,
                lock_timeout=lock_timeout,
                statement_timeout=statement_timeout,
                secrets=tuple(secret for secret in secrets if secret),
                notify=parse_notify(notify),
            ),
            auto_claim_sets=auto_claim_sets,
            receipt_retention=receipt_retention,
        )

    # -- plain verbs ---------------------------------------------------------

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
        rows = self._backend.query(table, conditions, mode, ordering, count)
        return [{"key": key, "value": value} for key, value in rows]

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
    ) -> dict[str, Any]:
        """``{"count": n, "first": key}``: :meth:`count`, and the key a FIFO claim takes next.

        ``first`` is None when nothing matches. A trigger compares it between
        counts: a different first key means the queue's head was consumed, even
        if as many rows arrived meanwhile and the count did not move.
        """
        table = parse_table(table)
        conditions, mode = parse_where(where), parse_match(match)
        cap = parse_limit(at_most, QUERY_LIMIT, field="at_most")
        ordering = parse_ordering("createdAt", "asc")
        chosen = self._claim_sets.for_claim(
            table, conditions, mode, ordering.column, may_declare=False
        )
        try:
            count, first = self._backend.count(table, conditions, mode, ordering, cap, chosen)
        except ClaimSetGone:
            self._claim_sets.forget(table)
            count, first = self._backend.count(table, conditions, mode, ordering, cap)
        return {"count": count, "first": first}

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
        parsed = _required_mutations(mutations, "mutations")
        fields = parse_return_fields(return_fields)
        receipt = self._receipt(idempotency_key, "update", table, key)
        value, replayed = self._backend.update(table, key, conditions, mode, parsed, receipt)
        result = {"updated": value is not None, "value": project(value, fields), "key": key}
        return _with_replayed(result, receipt, replayed)

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
    ) -> dict[str, Any]:
        """Claim up to ``limit`` rows matching ``where``, marking them in the same step.

        Two concurrent claims never return the same row. With ``mutations``
        None the rows get ``status: in_flight``, ``claimedAt: now`` and
        ``claimedBy: execution_id`` (a fresh unique id when none is given).
        With ``idempotency_key`` a repeated call claims nothing more and returns
        the batch the first call claimed.
        """
        table, conditions, mode, ordering, count, fields = _claim_options(
            (table, where, match, order_by, direction, limit, return_fields), "claim"
        )
        if mutations is None:
            if execution_id is not None:
                if not isinstance(execution_id, str) or not execution_id:
                    raise SpecError(
                        "execution_id", f"must be a non-empty string, got {execution_id!r}"
                    )
                check_text(execution_id, "execution_id", "execution ids")
                parsed = default_claim_mutations(execution_id, reused_id=True)
            else:
                parsed = default_claim_mutations(f"claim-{uuid.uuid4()}")
            written: Collection[str] = _DEFAULT_WRITTEN
        else:
            parsed = _required_mutations(mutations, "mutations")
            written = {mutation.path.top_level for mutation in parsed}
        receipt = self._receipt(idempotency_key, "claim", table, "")
        chosen = self._claim_sets.for_claim(
            table, conditions, mode, ordering.column, written=written, may_declare=True
        )
        if chosen is None and ordering.column == "record_timestamp":
            self._claim_sets.ensure_record_order()
        arguments = (table, conditions, mode, ordering, count, parsed)
        try:
            rows, replayed = self._backend.claim(*arguments, chosen, receipt)
        except ClaimSetGone:  # dropped by another process since this one listed it
            self._claim_sets.forget(table)
            rows, replayed = self._backend.claim(*arguments, None, receipt)
        claimed: list[dict[str, Any]]
        if fields is None:
            claimed = [{"key": key, "value": value} for key, value in rows]
        else:
            claimed = [{"key": key, "value": project(value, fields)} for key, value in rows]
        return _with_replayed({"claimed": claimed, "count": len(claimed)}, receipt, replayed)

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
        (inserted, stored), replayed = self._backend.upsert(table, key, value, parsed, receipt)
        result = {"inserted": inserted, "value": project(stored, fields), "key": key}
        return _with_replayed(result, receipt, replayed)

    # -- idempotency receipts ------------------------------------------------

    def _receipt(
        self, idempotency_key: str | None, primitive: Primitive, table: str, target: str
    ) -> Receipt | None:
        """The receipt a keyed call records; every so often, expired receipts go first."""
        if idempotency_key is None:
            return None
        key = parse_idempotency_key(idempotency_key)
        if self._keyed_calls % PURGE_EVERY == 0:
            self._backend.purge_receipts(PURGE_BATCH)
        self._keyed_calls += 1
        return Receipt(key, primitive, table, target, self._receipt_retention)

    # -- claimable sets ------------------------------------------------------

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
        try:
            return self._backend.explain_claim(
                table, conditions, mode, ordering, count, chosen, generic=generic
            )
        except ClaimSetGone:
            self._claim_sets.forget(table)
            return self._backend.explain_claim(
                table, conditions, mode, ordering, count, generic=generic
            )

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """One read-only, consistent view for :class:`~airflow_atomic_store.inspection.StoreInspector`.

        Nothing in it writes: no claimable set, no receipt, no row.
        """
        return self._backend.snapshot()

    # -- lifecycle -----------------------------------------------------------

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
