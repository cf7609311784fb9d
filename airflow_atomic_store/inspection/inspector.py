"""``StoreInspector``: validate the arguments, read one snapshot, shape the answer.

The backends count, group and page (``store/sql.py``); this module
chooses the queries (the ``status`` conditions, the stale cutoff) and turns
what comes back into :mod:`~airflow_atomic_store.inspection.results`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.inspection.results import (
    ActivityPoint,
    InFlightRow,
    InspectedRow,
    QueueActivity,
    RowPage,
    RowState,
    TableStats,
    TableSummary,
    TaskInstanceUse,
    TaskReceipt,
    TaskRow,
)
from airflow_atomic_store.spec import (
    QUERY_LIMIT,
    check_text,
    evaluate,
    is_number,
    parse_limit,
    parse_match,
    parse_table,
    parse_where,
)
from airflow_atomic_store.spec.values import INT_MAX
from airflow_atomic_store.store import AtomicStore
from airflow_atomic_store.store.contract import Claim, RowFilter, StoredReceipt
from airflow_atomic_store.timestamps import format_timestamp, parse_timestamp, utc_now

PENDING, IN_FLIGHT = "pending", "in_flight"
#: The longest stale or age threshold: now minus it is still a date.
MAX_THRESHOLD = timedelta(days=36_500)
#: ``activity``'s default window, and its longest (in minutes: one point each).
ACTIVITY_WINDOW = timedelta(days=1)
MAX_ACTIVITY_MINUTES = 7 * 24 * 60
_PENDING = parse_where([{"field": "status", "operator": "equals", "value": PENDING}])
_IN_FLIGHT = parse_where([{"field": "status", "operator": "equals", "value": IN_FLIGHT}])
#: The most receipts, tables and rows one task-instance view reads (it says when it stopped).
TASK_RECEIPT_LIMIT = 200
TASK_TABLE_LIMIT = 200
TASK_ROW_LIMIT = 1000
#: Statuses of a claimed row still held (the queues' and the semaphore's), and of one
#: given back (a hand-back to ``pending``, a released slot): anything else is finished.
HOLDING = frozenset({IN_FLIGHT, "held"})
HANDED_BACK = frozenset({PENDING, "free"})
#: The fixed ``status`` condition (position 0) is written as a literal, so a
#: queue's claimable set (a partial index on ``status``) can serve it.
_STATUS_INLINE = (0,)


class StoreInspector:
    """Read-only views of one :class:`AtomicStore`.

    Give it a store opened with ``read_only=True`` (``AtomicStore(url, read_only=True)``;
    in Airflow ``hook.open_read_only()``), as the command line and the UI page do: then
    nothing is created where no store is, and the first call raises
    :class:`~airflow_atomic_store.exceptions.ConnectionConfigError`. A store opened for
    writing creates its schema on first use, this inspector's calls included.

    :param clock: the current time (aware UTC); tests pass a fixed one.
    """

    def __init__(self, store: AtomicStore, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._store = store
        self._clock = clock

    def tables(self) -> list[TableSummary]:
        """Every logical table with its row count, sorted by name."""
        with self._store.snapshot() as snapshot:
            counts = snapshot.table_counts()
        return [TableSummary(table, rows) for table, rows in sorted(counts)]

    def stats(
        self,
        table: str,
        *,
        stale_after: timedelta | None = None,
        in_flight_limit: int = 50,
    ) -> TableStats:
        """Rows, counts per status, the oldest pending row's age and the in-flight claims.

        ``in_flight`` lists at most ``in_flight_limit`` claims, oldest first;
        ``in_flight_count`` counts them all. With ``stale_after``, claims older
        than that are flagged and counted (``stale_count``).
        """
        table = parse_table(table)
        threshold = None if stale_after is None else _positive(stale_after, "stale_after")
        shown = _limit(in_flight_limit, "in_flight_limit")
        now = self._clock()
        with self._store.snapshot() as snapshot:
            grouped = snapshot.status_counts(table)
            statuses = {status: count for status, count in grouped if status is not None}
            rows = sum(count for _, count in grouped)
            oldest = None
            if statuses.get(PENDING):
                oldest = snapshot.oldest_created(RowFilter(table, _PENDING, "all", _STATUS_INLINE))
            claims: list[Claim] = []
            stale_count = None
            if statuses.get(IN_FLIGHT):
                in_flight = RowFilter(table, _IN_FLIGHT, "all", _STATUS_INLINE)
                claims = snapshot.claims(in_flight, shown)
            if threshold is not None:
                stale_count = 0
                if statuses.get(IN_FLIGHT):
                    where = _stale_where(now - threshold)
                    stale_count = snapshot.count(RowFilter(table, where, "all", _STATUS_INLINE))
        return TableStats(
            table=table,
            rows=rows,
            status_counts=dict(sorted(statuses.items())),
            oldest_pending_age=None if oldest is None else now - oldest,
            in_flight_count=statuses.get(IN_FLIGHT, 0),
            in_flight=tuple(_in_flight_row(claim, now, threshold) for claim in claims),
            stale_after=threshold,
            stale_count=stale_count,
        )

    def activity(self, table: str, *, window: timedelta = ACTIVITY_WINDOW) -> QueueActivity:
        """Per minute of the last ``window``: items finished, and the backlog at its end.

        Read from the rows' timestamps, so nothing has to be recorded as it happens: a
        row with a string ``status`` arrived at its ``created_at``; one whose status is
        neither ``pending`` nor ``in_flight`` finished at its last write
        (``record_timestamp``). The backlog (``pending`` + ``in_flight``) is today's
        count, walked back minute by minute. Rows already deleted (claim-and-delete,
        a purge) left no timestamps: earlier backlogs leave them out.
        """
        table = parse_table(table)
        minutes = int(_positive(window, "window").total_seconds() // 60)
        if not 1 <= minutes <= MAX_ACTIVITY_MINUTES:
            raise SpecError("window", f"must be 1 minute to 7 days, got {window!r}")
        now = self._clock()
        end = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        since = end - timedelta(minutes=minutes)
        with self._store.snapshot() as snapshot:
            grouped = dict(snapshot.status_counts(table))
            seen = snapshot.activity(table, format_timestamp(since), (PENDING, IN_FLIGHT))
        backlog = grouped.get(PENDING, 0) + grouped.get(IN_FLIGHT, 0)
        points: list[ActivityPoint] = []
        for minute in reversed(range(minutes)):
            start = since + timedelta(minutes=minute)
            finished = seen.finished.get(minute, 0)
            points.append(ActivityPoint(start, finished, max(backlog, 0)))
            backlog += finished - seen.created.get(minute, 0)
        return QueueActivity(table, timedelta(minutes=1), tuple(reversed(points)))

    def stale(
        self, table: str, *, older_than: timedelta, limit: int = 100
    ) -> tuple[InFlightRow, ...]:
        """In-flight rows claimed longer than ``older_than`` ago, oldest claim first.

        The same test the stale-claim recovery recipe claims with:
        ``status equals in_flight`` and ``claimedAt lt`` now minus ``older_than``.
        """
        table = parse_table(table)
        threshold = _positive(older_than, "older_than")
        count = _limit(limit, "limit")
        now = self._clock()
        with self._store.snapshot() as snapshot:
            stale = RowFilter(table, _stale_where(now - threshold), "all", _STATUS_INLINE)
            claims = snapshot.claims(stale, count)
        return tuple(_in_flight_row(claim, now, threshold) for claim in claims)

    def rows(
        self,
        table: str,
        *,
        where: Any = None,
        match: str = "all",
        limit: int = 50,
        offset: int = 0,
    ) -> RowPage:
        """One page of rows matching ``where`` (the operators' filter language)."""
        table = parse_table(table)
        conditions, mode = parse_where(where), parse_match(match)
        count = _limit(limit, "limit")
        start = _offset(offset)
        now = format_timestamp(self._clock())
        with self._store.snapshot() as snapshot:
            stored = snapshot.rows(RowFilter(table, conditions, mode), count + 1, start)
        inspected = tuple(
            InspectedRow(
                key=row.key,
                value=row.value,
                created_at=row.created_at,
                updated_at=row.updated_at,
                **_shape(row.value, now),
            )
            for row in stored[:count]
        )
        return RowPage(table, inspected, count, start, has_more=len(stored) > count)

    def task_instance(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int = -1,
        *,
        started_at: datetime | None = None,
    ) -> TaskInstanceUse:
        """What one task instance did here, and what its DAG run holds.

        Its keyed calls are its receipts (key ``{dag_id}/{run_id}/{task_id}/{map_index}``
        and its steps, ``templating.task_instance_key``); its claims' rows are read as
        they stand now. A claim writes ``claimedBy`` = the run's execution id
        (``{dag_id}/{run_id}``), shared by the run's tasks, so the rows the run holds
        (``claimedBy`` or a lease's ``holder``) are listed too: every table is
        searched, the tables this task used first. ``started_at`` (aware): when the
        task instance's latest try started; a receipt written before it was replayed.
        """
        execution = f"{_name(dag_id, 'dag_id')}/{_name(run_id, 'run_id')}"
        task_key = f"{execution}/{_name(task_id, 'task_id')}/{_map_index(map_index)}"
        if started_at is not None and (
            not isinstance(started_at, datetime) or started_at.tzinfo is None
        ):
            raise SpecError("started_at", f"must be an aware datetime, got {started_at!r}")
        owned = parse_where(
            [
                {"field": "claimedBy", "operator": "equals", "value": execution},
                {"field": "holder", "operator": "equals", "value": execution},
            ]
        )
        now = format_timestamp(self._clock())
        with self._store.snapshot() as snapshot:
            stored = snapshot.receipts(task_key, TASK_RECEIPT_LIMIT + 1)
            names = {table for table, _ in snapshot.table_counts()}
            used = sorted({receipt.table for receipt in stored} & names)
            searched = [*used, *sorted(names.difference(used))][:TASK_TABLE_LIMIT]
            found: dict[tuple[str, str], TaskRow] = {}
            truncated = len(stored) > TASK_RECEIPT_LIMIT or len(names) > TASK_TABLE_LIMIT
            for table in searched:
                room = TASK_ROW_LIMIT - len(found)
                rows = snapshot.rows(RowFilter(table, owned, "any"), room + 1, 0)
                truncated = truncated or len(rows) > room
                for row in rows[:room]:
                    found[table, row.key] = _task_row(table, row.key, row.value, execution, now)
        receipts = tuple(
            _task_receipt(receipt, task_key, started_at) for receipt in stored[:TASK_RECEIPT_LIMIT]
        )
        claimed = {
            (receipt.table, key): found.get((receipt.table, key))
            or TaskRow(receipt.table, key, _missing(receipt), None, None, None, None)
            for receipt in receipts
            for key in receipt.claimed
        }
        return TaskInstanceUse(
            task_key=task_key,
            execution_id=execution,
            receipts=receipts,
            claimed=tuple(claimed.values()),
            run_rows=tuple(row for place, row in found.items() if place not in claimed),
            tables_searched=len(searched),
            tables=len(names),
            truncated=truncated,
        )


def _name(value: Any, field: str) -> str:
    """A DAG, run or task id: non-empty text (the key's parts are joined with ``/``)."""
    if not isinstance(value, str) or not value:
        raise SpecError(field, f"must be a non-empty string, got {value!r}")
    check_text(value, field, "ids")
    return value


def _map_index(value: Any) -> int:
    """Airflow's map index: -1 for a task that is not mapped."""
    if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= INT_MAX:
        raise SpecError("map_index", f"must be an integer from -1 (not mapped) up, got {value!r}")
    return value


def _claim_outcome(result: Any) -> tuple[str, tuple[str, ...]]:
    """A claim records ``[[key, value], …]`` in claim order."""
    keys = tuple(str(row[0]) for row in result or () if isinstance(row, list) and row)
    return (f"claimed {len(keys)}" if keys else "claimed nothing"), keys


def _delete_claim_outcome(result: Any) -> tuple[str, tuple[str, ...]]:
    """A delete-claim records what a claim does; its rows left the table with it."""
    outcome, keys = _claim_outcome(result)
    return (f"claimed and deleted {len(keys)}" if keys else outcome), keys


def _update_outcome(result: Any) -> tuple[str, tuple[str, ...]]:
    """An update records ``[new value]``, ``[null]`` when nothing was updated."""
    updated = isinstance(result, list) and bool(result) and result[0] is not None
    return ("updated" if updated else "not updated (no row, or its guard failed)"), ()


def _upsert_outcome(result: Any) -> tuple[str, tuple[str, ...]]:
    """An upsert records ``[inserted, value]``."""
    inserted = isinstance(result, list) and bool(result) and result[0] is True
    return ("inserted" if inserted else "found the row (not inserted)"), ()


def _many(verb: str) -> Callable[[Any], tuple[str, tuple[str, ...]]]:
    """A bulk call records the keys it applied to: inserted, or updated."""

    def outcome(result: Any) -> tuple[str, tuple[str, ...]]:
        return f"{verb} {len(result) if isinstance(result, list) else 0} rows", ()

    return outcome


@dataclass(frozen=True)
class ReceiptUse:
    """How to read a receipt of one use (``store/receipts.py``'s ``Use``): a line and the
    keys a claim took from its result; whether its target is a row key (bulk calls name
    their key set by a digest); whether its claimed rows left the table with it."""

    describe: Callable[[Any], tuple[str, tuple[str, ...]]]
    one_row: bool = False
    deletes: bool = False


#: Every use a receipt records, by the name in its ``primitive`` column.
USES: dict[str, ReceiptUse] = {
    "claim": ReceiptUse(_claim_outcome),
    "delete-claim": ReceiptUse(_delete_claim_outcome, deletes=True),
    "update": ReceiptUse(_update_outcome, one_row=True),
    "upsert": ReceiptUse(_upsert_outcome, one_row=True),
    "upsert_many": ReceiptUse(_many("inserted")),
    "update_many": ReceiptUse(_many("updated")),
}
#: A use this code does not know (a newer store's): its name, its target as recorded.
_UNKNOWN = ReceiptUse(lambda result: ("", ()), one_row=True)


def _task_receipt(
    receipt: StoredReceipt, task_key: str, started_at: datetime | None
) -> TaskReceipt:
    use = USES.get(receipt.primitive, _UNKNOWN)
    outcome, claimed = use.describe(receipt.result)
    return TaskReceipt(
        key=receipt.key,
        step=None if receipt.key == task_key else receipt.key[len(task_key) + 1 :],
        primitive=receipt.primitive,
        table=receipt.table,
        target=receipt.target if use.one_row else "",
        outcome=outcome or receipt.primitive,
        claimed=claimed,
        created_at=receipt.created_at,
        expires_at=receipt.expires_at,
        replayed=None if started_at is None else receipt.created_at < started_at,
    )


def _missing(receipt: TaskReceipt) -> RowState:
    """A claimed row the run no longer holds: deleted by its claim, or gone since."""
    return "deleted" if USES.get(receipt.primitive, _UNKNOWN).deletes else "gone"


def _text_field(value: dict[str, Any], field: str) -> str | None:
    found = value.get(field)
    return found if isinstance(found, str) else None


def _task_row(table: str, key: str, value: dict[str, Any], execution: str, now: str) -> TaskRow:
    """A row the run's search found, with where it stands (see :class:`TaskRow`)."""
    fence = value.get("fence")
    status, expires = _text_field(value, "status"), _text_field(value, "expiresAt")
    state: RowState
    if value.get("holder") == execution and "expiresAt" in value:  # a lease (leader_lease)
        if expires is not None and expires > now:
            state = "held"
        else:
            state = "handed_back" if value.get("releasedAt") else "expired"
    elif value.get("claimedBy") != execution:
        state = "gone"
    elif status is None or status in HOLDING:
        state = "held"
    else:
        state = "handed_back" if status in HANDED_BACK else "finished"
    return TaskRow(
        table=table,
        key=key,
        state=state,
        status=status,
        claimed_at=_text_field(value, "claimedAt"),
        fence=fence if is_number(fence) else None,
        expires_at=expires,
    )


def _positive(delta: Any, field: str) -> timedelta:
    """Bounded: now minus a longer threshold is no date (an OverflowError, later)."""
    if not isinstance(delta, timedelta) or not timedelta(0) < delta <= MAX_THRESHOLD:
        raise SpecError(
            field, f"must be a positive duration (a timedelta) of at most a century, got {delta!r}"
        )
    return delta


def _limit(limit: Any, field: str) -> int:
    """A page size, checked as the query verb checks its limit (1 to 10,000)."""
    try:
        return parse_limit(limit, QUERY_LIMIT)
    except SpecError as exc:
        raise SpecError(field, exc.problem) from None


def _offset(offset: Any) -> int:
    """Bounded by the databases' 64-bit integers (a larger one failed in the driver)."""
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= INT_MAX:
        raise SpecError("offset", f"must be an integer from 0 to {INT_MAX}, got {offset!r}")
    return offset


def _stale_where(cutoff: datetime) -> tuple[Any, ...]:
    return parse_where(
        [
            {"field": "status", "operator": "equals", "value": IN_FLIGHT},
            {"field": "claimedAt", "operator": "lt", "value": format_timestamp(cutoff)},
        ]
    )


def _claim_time(text: str | None) -> datetime | None:
    """A ``claimedAt`` as a moment: canonical, else any ISO 8601 form (naive means UTC)."""
    if text is None:
        return None
    try:
        return parse_timestamp(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _in_flight_row(claim: Claim, now: datetime, threshold: timedelta | None) -> InFlightRow:
    """Stale exactly when the SQL count says so: the reference ``claimedAt lt cutoff``."""
    claimed_at = _claim_time(claim.claimed_at)
    stale = threshold is not None and evaluate(
        _stale_where(now - threshold), "all", {"status": IN_FLIGHT, "claimedAt": claim.claimed_at}
    )
    return InFlightRow(
        key=claim.key,
        claimed_by=claim.claimed_by,
        claimed_at=claimed_at,
        claim_age=None if claimed_at is None else now - claimed_at,
        stale=stale,
    )


def _shape(value: dict[str, Any], now: str) -> dict[str, Any]:
    tokens = value.get("tokens")
    tokens = tokens if is_number(tokens) else None
    if "holder" in value and "expiresAt" in value:
        expires = value["expiresAt"]
        held = isinstance(expires, str) and expires > now
        return {"shape": "lease", "lease_state": "held" if held else "expired", "tokens": tokens}
    return {"shape": None if tokens is None else "bucket", "lease_state": None, "tokens": tokens}
