"""What the triggers share: their validated arguments and the observe-then-wait loop."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from functools import partial
from typing import Any

from airflow_atomic_store import timestamps
from airflow_atomic_store.exceptions import SpecError, StoreUnavailableError
from airflow_atomic_store.spec import json_text
from airflow_atomic_store.spec.conditions import evaluate, parse_where
from airflow_atomic_store.spec.options import ORDER_COLUMNS, parse_ordering
from airflow_atomic_store.spec.watch import parse_seconds, parse_watch
from airflow_atomic_store.triggers.hub import NOTHING, Waiter, Watch, hub_for


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

    @property
    def watched(self) -> Watch:
        """What its count watches (its probe's identity: table, filter, order)."""
        return Watch(self.table, self.where, self.match, self.order_by, self.direction)

    def to_kwargs(self) -> dict[str, Any]:
        return {
            "conn_id": self.conn_id,
            "table": self.table,
            "where": json.dumps(self.where, sort_keys=True, separators=(",", ":")),
            "match": self.match,
            "min_rows": self.min_rows,
            "poll_interval": self.poll_interval,
        }


#: Whether the row with this key still matches the watch (read with the table's other rows).
StillMatches = Callable[[str], Awaitable[bool]]

_ORDER_NAMES = {column: name for name, column in ORDER_COLUMNS.items()}


async def counts(
    watch: WatchArguments, log: Any, *, deadline: float | None = None
) -> AsyncGenerator[tuple[int, str | None, StillMatches], None]:
    """``(count, first key, still_matches)`` now, then after every change, forever.

    The first key is the one a claim in ``watch``'s order takes next;
    ``still_matches(key)`` asks whether a row (one announced earlier) is still
    work. The count is the watch's shared probe (``hub.py``): every waiter with
    the same table, filter and order shares one count per wake. See
    :func:`observations` for outages and ``deadline``.
    """
    conditions = parse_where(watch.where)

    async def still_matches(key: str) -> bool:
        value = await hub.read_row(watch.table, key, watch.poll_interval)
        return value is not None and evaluate(conditions, watch.match, value)

    async with hub_for(watch.conn_id) as hub:
        join = partial(hub.join_count, watch.watched, watch.poll_interval)
        async with aclosing(observations(watch, log, join, deadline=deadline)) as stream:
            async for count, first in stream:
                yield count, first, still_matches


async def row_values(
    watch: WatchArguments, key: str, log: Any, *, deadline: float | None = None
) -> AsyncGenerator[dict[str, Any] | None, None]:
    """The row ``key``'s value (None while it does not exist) now, then after every change.

    Read with every other awaited row of its table, in one statement per wake
    (the table's shared probe, ``hub.py``). See :func:`observations`.
    """
    async with hub_for(watch.conn_id) as hub:
        join = partial(hub.join_row, watch.table, key, watch.poll_interval)
        async with aclosing(observations(watch, log, join, deadline=deadline)) as stream:
            async for value in stream:
                yield value


async def observations(
    watch: WatchArguments,
    log: Any,
    join: Callable[[], Awaitable[Waiter]],
    *,
    deadline: float | None = None,
) -> AsyncGenerator[Any, None]:
    """The joined waiter's first observation, then each change, forever.

    With nothing new for ``poll_interval`` seconds the last observation comes
    again (the caller's clocks: its deadline, its re-arming). A database outage
    is waited out (one warning; the probe keeps trying): a trigger that raised
    would stop watching. Errors a retry cannot fix (access denied, a missing
    connection) are raised. ``deadline`` (``time.monotonic()``) bounds every
    wait, so a caller with a deadline gets an observation at it; when the store
    is unavailable at the deadline (or nothing could be read by then) the stream
    ends instead. Use it in ``contextlib.aclosing`` so that the waiter leaves
    (and its channel is unlistened, if it was the last) as soon as the caller stops.
    """
    waiter = await join()
    try:
        outage = False
        last: Any = NOTHING
        while True:
            try:
                observed = await waiter.observe(_bounded(watch.poll_interval, deadline))
            except StoreUnavailableError as exc:
                if not outage:
                    log.warning(
                        "atomic store unavailable (%s); waiting for it (polling every %ss)",
                        exc,
                        watch.poll_interval,
                    )
                outage = True
                if _passed(deadline):
                    return
                continue
            if observed is NOTHING:
                if last is NOTHING:  # no read has answered yet
                    if _passed(deadline):
                        return
                    continue
                observed = last
            if outage:
                log.info("atomic store reachable again")
                outage = False
            last = observed
            yield observed
    finally:
        waiter.leave()


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


def _passed(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _bounded(seconds: float, deadline: float | None) -> float:
    if deadline is None:
        return seconds
    return max(0.0, min(seconds, deadline - time.monotonic()))
