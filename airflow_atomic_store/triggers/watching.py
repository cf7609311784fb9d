"""What both triggers share: their validated arguments and the count-then-wait loop."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_atomic_store import timestamps
from airflow_atomic_store.exceptions import SpecError, StoreUnavailableError
from airflow_atomic_store.spec import json_text
from airflow_atomic_store.spec.options import ORDER_COLUMNS, parse_ordering
from airflow_atomic_store.spec.watch import parse_seconds, parse_watch
from airflow_atomic_store.triggers.sources import RowSource, open_source

Observed = TypeVar("Observed")


@dataclass(frozen=True)
class WatchArguments:
    """A trigger's arguments, validated by the spec layer; what ``serialize()`` holds.

    ``where`` is kept as the user gave it (a list of plain dicts), and serialized
    as its JSON text: every serialized value is a plain scalar. Airflow links a
    watcher's trigger to its asset by a hash of the trigger's kwargs, taken once as
    the DAG encodes them and once as the trigger table gives them back; a dict
    comes back in another form than it was encoded in (Airflow 3.3.2), the two
    hashes differ, and the trigger is created, never linked, and cleaned up as
    unused: the watcher never runs. Text encodes as itself on every line.

    ``order_by``/``direction`` are the order of the claim the trigger's events
    lead to (its head is the row that claim takes next); only
    ``ClaimableRowsTrigger`` serializes them.
    """

    conn_id: str
    table: str
    where: list[dict[str, Any]]
    match: str
    min_rows: int
    poll_interval: float
    order_by: str = "createdAt"
    direction: str = "asc"

    @classmethod
    def parse(
        cls,
        conn_id: Any,
        table: Any,
        where: Sequence[Mapping[str, Any]] | str | None,
        match: Any,
        min_rows: Any,
        poll_interval: Any,
        order_by: Any = "createdAt",
        direction: Any = "asc",
    ) -> WatchArguments:
        if not isinstance(conn_id, str) or not conn_id:
            raise SpecError("conn_id", f"must be a connection id, got {conn_id!r}")
        conditions: Any = where
        if isinstance(where, str):  # as serialize() wrote it
            try:
                conditions = json_text.loads(where, "where")
            except ValueError as exc:
                raise SpecError("where", f"is not JSON text: {exc}") from None
        watch = parse_watch(table, conditions, match, min_rows)
        ordering = parse_ordering(order_by, direction)
        return cls(
            conn_id=conn_id,
            table=watch.table,
            where=[dict(condition) for condition in (conditions or ())],
            match=watch.match,
            min_rows=watch.min_rows,
            poll_interval=parse_seconds(poll_interval, "poll_interval"),
            order_by=_ORDER_NAMES[ordering.column],
            direction=ordering.direction,
        )

    def to_kwargs(self) -> dict[str, Any]:
        return {
            "conn_id": self.conn_id,
            "table": self.table,
            "where": json.dumps(self.where, sort_keys=True, separators=(",", ":")),
            "match": self.match,
            "min_rows": self.min_rows,
            "poll_interval": self.poll_interval,
        }


#: Whether the row with this key still matches the watch (``RowSource.matches``).
StillMatches = Callable[[str], Awaitable[bool]]

_ORDER_NAMES = {column: name for name, column in ORDER_COLUMNS.items()}


async def counts(
    watch: WatchArguments, log: Any, *, deadline: float | None = None
) -> AsyncGenerator[tuple[int, str | None, StillMatches], None]:
    """``(count, first key, still_matches)`` now, then after every wake-up, forever.

    The first key is the one a claim in ``watch``'s order takes next;
    ``still_matches(key)`` asks whether a row (one announced earlier) is still
    work, through the same source. See :func:`observations` for outages and
    ``deadline``.
    """
    async with aclosing(observations(watch, log, _count, deadline=deadline)) as stream:
        async for backlog, source in stream:
            yield (*backlog, source.matches)


async def _count(source: RowSource) -> tuple[int, str | None]:
    return await source.count()


async def observations(
    watch: WatchArguments,
    log: Any,
    probe: Callable[[RowSource], Awaitable[Observed]],
    *,
    deadline: float | None = None,
) -> AsyncGenerator[tuple[Observed, RowSource], None]:
    """``probe(source)`` now, then after every wake-up, forever, with the source.

    A database outage is waited out (one warning, then a probe every
    ``poll_interval``): a trigger that raised would stop watching. Errors a retry
    cannot fix (access denied, a missing connection) are raised.
    ``deadline`` (``time.monotonic()``) bounds every wait, so a caller with a
    deadline gets an observation at it; when the store is unavailable at the
    deadline the stream ends instead (the caller's deadline has come: an outage
    must not hold a wait past it, nor retry with no pause).
    Use it in ``contextlib.aclosing`` so the connections close as soon as the
    caller stops.
    """
    source = await open_source(watch.conn_id, watch)
    try:
        await source.start()
        outage = False
        while True:
            try:
                observed = await probe(source)
            except StoreUnavailableError as exc:
                if not outage:
                    log.warning(
                        "atomic store unavailable (%s); trying again every %ss",
                        exc,
                        watch.poll_interval,
                    )
                outage = True
                if deadline is not None and time.monotonic() >= deadline:
                    return
                # The source's wait: on PostgreSQL it listens again as soon as it can.
                await source.wait(_bounded(watch.poll_interval, deadline))
                continue
            if outage:
                log.info("atomic store reachable again")
                outage = False
            yield observed, source
            await source.wait(_bounded(watch.poll_interval, deadline))
    finally:
        await source.close()


def earliest_end(ends: Mapping[str, float]) -> tuple[str, float | None]:
    """A one-shot wait's end: the earliest of ``ends`` (``{status: epoch seconds}``) as
    ``(status, time.monotonic() deadline)``; at a tie the timeout (the task tries once
    more), and ``("timeout", None)`` when there is none."""
    if not ends:
        return "timeout", None
    status, at = min(ends.items(), key=lambda end: (end[1], end[0] != "timeout"))
    return status, time.monotonic() + max(0.0, at - time.time())


def parse_ends(**stamps: str | None) -> dict[str, float]:
    """``{status: epoch seconds}`` of a wait's canonical timestamps (None: no such end).

    The arguments are named after the trigger's fields: ``deadline`` ends as
    ``timeout``, ``rerender_at`` as ``rerender``.
    """
    statuses = {"deadline": "timeout", "rerender_at": "rerender"}
    ends = {}
    for field, stamp in stamps.items():
        if stamp is None:
            continue
        try:
            moment = timestamps.parse_timestamp(stamp)
        except (TypeError, ValueError) as exc:
            raise SpecError(field, f"must be a canonical UTC timestamp, got {stamp!r}") from exc
        ends[statuses[field]] = moment.timestamp()
    return ends


def _bounded(seconds: float, deadline: float | None) -> float:
    if deadline is None:
        return seconds
    return max(0.0, min(seconds, deadline - time.monotonic()))
