"""``ClaimableRowsTrigger``: start a dispatcher DAG run when claimable rows appear.

Used in an ``AssetWatcher``; the DAG scheduled on the asset claims with
``AtomicClaimOperator``, so exactly-once stays with the claim: this trigger only
counts, never claims or marks a row.

**No event storms.** A queue filling up row by row must not start a run per row.
The trigger fires when it is *armed* and at least ``min_rows`` rows match, and is
then disarmed. It re-arms when the runs it caused have visibly drained work:

* the count falls below ``min_rows`` (the queue is drained: the next row fires at once);
* or the row it announced as next no longer matches: the row the dispatcher's
  claim (in ``order_by``/``direction``, the claim's own order) takes next when
  it fired was taken (the run claimed; the rows still matching are ones it did
  not take, arrivals after its claim or beyond its ``limit``, so it fires again
  for them at once). That marker tells a claim apart from a quiet queue even
  when as many rows arrived as were claimed, when the count is capped (a
  backlog over 1000 rows), and without claims having to notify. It is not "the
  head moved": in a LIFO order (``direction="desc"``) every arrival becomes the
  head. The marker is looked up only when the head changed since the last count;
* or the count falls below the highest count seen since it fired (rows left the
  filter in another order than the claim's);
* or ``rearm_after`` seconds pass with the count never falling (the run failed,
  or has not started): it fires again, once per ``rearm_after``.

So a burst of arrivals costs one event, and the events of a backlog number about
backlog / claim ``limit``, not one per row. Airflow deduplicates further: events
for an asset while the DAG's run is still queued add asset events but no second
run. On Airflow 3.3 the state (armed, the peak, when it fired) is kept in the
watched asset's state store, under a key of its watch's own (``_state_key``:
the asset's store is shared by all its watchers), so a restarted trigger does
not fire again for work it already announced; before 3.3 it lives in memory, and a restart may fire once
more (a run that claims what is there, or nothing).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_atomic_store import timestamps
from airflow_atomic_store.exceptions import StoreUnavailableError
from airflow_atomic_store.spec.watch import parse_seconds
from airflow_atomic_store.triggers.watching import StillMatches, WatchArguments, counts

#: Seconds before a fired trigger fires again for work nobody claimed (see the module doc).
DEFAULT_REARM_AFTER = 120.0
#: The state's key in the watched asset's state store, followed by the watch's digest.
_STATE_KEY = "atomic_store_trigger"
#: The arguments that say which work a state is about (not how often it is counted).
_WATCH_IDENTITY = ("conn_id", "table", "where", "match", "min_rows", "order_by", "direction")


@dataclass(frozen=True)
class Arming:
    """The storm control's state: whether the next count over ``min_rows`` fires."""

    armed: bool = True
    peak: int = 0  # the highest count seen since the last event
    head: str | None = None  # the row the claim took next when it fired: the marker
    fired_at: float = 0.0  # wall-clock seconds of the last event

    def after(
        self,
        count: int,
        head: str | None,
        taken: bool,
        min_rows: int,
        now: float,
        rearm_after: float,
    ) -> tuple[Arming, bool]:
        """The next state, and whether to fire, after a count at ``now``.

        ``taken``: the marker row (``self.head``) no longer matches.
        """
        if count < min_rows:
            return Arming(armed=True, peak=count), False
        drained = count < self.peak or taken
        if self.armed or drained or now - self.fired_at >= rearm_after:
            return Arming(armed=False, peak=count, head=head, fired_at=now), True
        return replace(self, peak=max(self.peak, count)), False

    def to_json(self) -> dict[str, Any]:
        return {
            "armed": self.armed,
            "peak": self.peak,
            "head": self.head,
            "fired_at": self.fired_at,
        }

    @classmethod
    def from_json(cls, data: Any) -> Arming:
        if not isinstance(data, Mapping):
            return cls()
        try:
            head = data["head"]
            return cls(
                bool(data["armed"]),
                int(data["peak"]),
                None if head is None else str(head),
                float(data["fired_at"]),
            )
        except (KeyError, TypeError, ValueError):
            return cls()


class ClaimableRowsTrigger(BaseEventTrigger):
    """Fire when at least ``min_rows`` rows of ``table`` match ``where``; never claims.

    For an ``AssetWatcher``::

        Asset("pending_ops", watchers=[AssetWatcher(
            name="pending_ops_work",
            trigger=ClaimableRowsTrigger(
                table="pending_ops",
                where=[{"field": "status", "operator": "equals", "value": "pending"}],
            ),
        )])

    The event's payload is ``{"table", "count", "at"}`` (``count`` is capped at 1000).
    On PostgreSQL the trigger ``LISTEN``s for the store's writes to ``table`` and
    wakes within milliseconds of a commit; it also counts every ``poll_interval``
    (writers outside the store, a lost connection). On SQLite it counts every
    ``poll_interval``. Its serialized arguments (stored in plain text in the
    serialized DAG) are the connection id and the spec only, never a password.

    :param conn_id: connection id of the store.
    :param table: the queue's logical table.
    :param where: conditions selecting claimable rows (the claim's own ``where``), or
        their JSON text (as ``serialize()`` writes them).
    :param match: ``"all"`` or ``"any"``.
    :param min_rows: fire only when at least this many rows match (1 to 1000).
    :param poll_interval: seconds between counts when nothing wakes the trigger.
    :param rearm_after: seconds after an event before work that nobody claimed
        fires again (see the module docstring).
    :param order_by: the dispatcher's claim's ``order_by`` (``createdAt`` or
        ``recordTimestamp``): the trigger watches the row that claim takes next.
    :param direction: the dispatcher's claim's ``direction`` (``asc`` or ``desc``).
    """

    def __init__(
        self,
        *,
        conn_id: str = "atomic_store_default",
        table: str,
        where: Sequence[Mapping[str, Any]] | str | None = None,
        match: str = "all",
        min_rows: int = 1,
        poll_interval: float = 2.0,
        rearm_after: float = DEFAULT_REARM_AFTER,
        order_by: str = "createdAt",
        direction: str = "asc",
    ) -> None:
        super().__init__()
        self.watch = WatchArguments.parse(
            conn_id, table, where, match, min_rows, poll_interval, order_by, direction
        )
        self.rearm_after = parse_seconds(rearm_after, "rearm_after", (0.0, 86_400.0))

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                **self.watch.to_kwargs(),
                "rearm_after": self.rearm_after,
                "order_by": self.watch.order_by,
                "direction": self.watch.direction,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        watch = self.watch
        state = await self._load()
        last_head: str | None = None
        async with aclosing(counts(watch, self.log)) as stream:
            async for count, head, still_matches in stream:
                taken = False
                if (
                    not state.armed
                    and count >= watch.min_rows
                    and state.head is not None
                    and head != state.head
                    and head != last_head  # nothing happened since the last look
                ):
                    taken = await _taken(still_matches, state.head)
                last_head = head
                now = time.time()
                after, fire = state.after(count, head, taken, watch.min_rows, now, self.rearm_after)
                if after.armed != state.armed or fire:
                    await self._save(after)
                state = after
                if fire:
                    self.log.info("%d row(s) of %r to claim: firing", count, watch.table)
                    yield TriggerEvent(
                        {"table": watch.table, "count": count, "at": timestamps.now()}
                    )

    # -- state across restarts (Airflow 3.3: the watched asset's state store) --------------

    @property
    def _state_key(self) -> str:
        """This watch's key: the asset's store is shared by every watcher of the asset.

        Airflow gives each asset one namespace (``AssetStateStoreAccessor(name=)``),
        so two watchers of one asset (other tables or filters) under one key
        overwrote each other's state, and a restarted trigger loaded the other's:
        it announced again what it had announced. A trigger re-created from its
        serialized kwargs has the same digest, so it finds its own state.
        """
        _, kwargs = self.serialize()
        identity = json.dumps(
            [kwargs[name] for name in _WATCH_IDENTITY], separators=(",", ":")
        ).encode()
        return f"{_STATE_KEY}:{hashlib.sha256(identity).hexdigest()[:32]}"

    async def _load(self) -> Arming:
        accessor = getattr(self, "asset_state_store", None)
        if accessor is None:
            return Arming()
        try:
            return Arming.from_json(await accessor.aget(self._state_key))
        except Exception as exc:  # several assets on one trigger, or the store is unreachable
            self.log.info("no trigger state store (%s): state kept in memory", exc)
            self.asset_state_store = None
            return Arming()

    async def _save(self, state: Arming) -> None:
        accessor = getattr(self, "asset_state_store", None)
        if accessor is None:
            return
        try:
            await accessor.aset(self._state_key, state.to_json())
        except Exception as exc:
            self.log.info("cannot keep trigger state (%s): kept in memory", exc)
            self.asset_state_store = None


async def _taken(still_matches: StillMatches, key: str) -> bool:
    """Whether the announced row was taken; in an outage, not known yet (the next count waits it out)."""
    try:
        return not await still_matches(key)
    except StoreUnavailableError:
        return False
