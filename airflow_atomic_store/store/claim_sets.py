"""Which claimable set serves a claim, and when the store declares one by itself.

One policy for both backends; the backends only store, build, list and drop.
A claim never depends on a set for correctness: with or without one it runs
the same filter. A set only lets the database walk the claimable rows instead
of the table's whole history.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from airflow_atomic_store.spec import Condition
from airflow_atomic_store.spec.claim_sets import (
    ClaimSet,
    automatic_claim_set,
    condition_key,
    covered_conditions,
    parse_claim_set,
)
from airflow_atomic_store.spec.options import OrderColumn

log = logging.getLogger("airflow_atomic_store.store")

Origin = Literal["declared", "automatic"]
State = Literal["ready", "building", "failed"]

#: Most sets the store declares by itself on one logical table; declared ones are not counted.
AUTOMATIC_SETS_PER_TABLE = 4
#: Longest a claim waits for a set the store builds for it (PostgreSQL); a build
#: that takes longer is abandoned and recorded as failed, and claims go on unindexed.
#: (A build that would wait for other sessions' open transactions stands aside
#: after 2 s instead, unrecorded, and is tried again later.)
AUTOMATIC_BUILD_SECONDS = 30.0
#: How long a process trusts its list of a table's sets when none serves a claim.
REFRESH_SECONDS = 10.0
#: Most filters per table whose chosen set a process remembers (``ClaimSetCatalog._best``).
MAX_REMEMBERED_CHOICES = 256
#: How long a process waits before trying again to declare a set it could not build.
RETRY_SECONDS = 60.0
#: How often a claim waiting for another process's build of its set looks again:
#: a twentieth of the time it has waited so far, within these bounds (``build_poll_pause``).
BUILD_POLL_MIN_SECONDS = 0.01
BUILD_POLL_MAX_SECONDS = 0.25
BUILD_POLL_FRACTION = 0.05
#: How long a claim that lost the build lock waits for the winner to list the set it
#: builds (the winner takes the lock, then records the set): a build of another set
#: is not waited for beyond this.
UNLISTED_BUILD_SECONDS = 1.0


def build_poll_pause(waited: float) -> float:
    """The pause before a waiting claim looks again at a build, after ``waited`` seconds.

    A short build (a queue's set over a few hundred thousand rows takes about
    a tenth of a second) is noticed within 10 ms of its end: every claimer's
    first batch waits on it. A long one (millions of rows) is looked at four
    times a second by each waiting worker, not twenty. So a claim learns of a
    build's end at most a twentieth of its wait late, and never more than a
    quarter of a second.
    """
    return min(BUILD_POLL_MAX_SECONDS, max(BUILD_POLL_MIN_SECONDS, waited * BUILD_POLL_FRACTION))


@dataclass(frozen=True)
class StoredSet:
    """A set as the store's catalog holds it."""

    name: str
    claim_set: ClaimSet
    origin: Origin
    state: State
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
    name: str, spec: dict[str, Any], origin: Origin, problem: str | None, index_ready: bool
) -> StoredSet:
    """A catalog row as a :class:`StoredSet`; its spec is validated again on the way in."""
    claim_set = parse_claim_set(spec["table"], spec["where"], spec["match"], spec["order_by"])
    state: State = "failed" if problem else ("ready" if index_ready else "building")
    return StoredSet(name, claim_set, origin, state, problem)


@dataclass(frozen=True)
class ChosenSet:
    """The set a claim runs against: its index and which conditions become literals.

    ``predicate`` is a disjunctive set's conditions in its index predicate's
    order. A claim through such a set is an ``any`` of the same conditions,
    perhaps in another order or repeated, and SQLite proves an ``OR`` predicate
    only from the same terms in the same order, so the claim writes the set's
    conditions in place of its own: the same filter. The name decides the set,
    so ``predicate`` takes no part in comparing (it holds unhashable values).
    """

    name: str
    inline: frozenset[int]
    predicate: tuple[Condition, ...] | None = field(default=None, compare=False)

    def claim_filter(
        self, conditions: Sequence[Condition]
    ) -> tuple[Sequence[Condition], frozenset[int]]:
        """The conditions a claim through this set writes, and which of them as literals."""
        if self.predicate is None:
            return conditions, self.inline
        return self.predicate, frozenset(range(len(self.predicate)))


class SetStorage(Protocol):
    """What a backend does for claimable sets."""

    def load_claim_sets(self, table: str | None) -> list[StoredSet]: ...

    def build_claim_set(
        self,
        claim_set: ClaimSet,
        origin: Origin,
        *,
        timeout: float | None,
        automatic_limit: int,
    ) -> StoredSet | None:
        """Record and build the set's index; None when it was not built now.

        ``timeout`` None (a declared set) waits for other builds and for the
        build itself however long they take, and raises on failure. With a
        timeout (an automatic set) the backend does not wait for another
        process's build, does nothing when the table already has
        ``automatic_limit`` automatic sets, and records a build that fails.
        """
        ...

    def drop_claim_set(self, name: str) -> bool: ...

    def build_in_progress(self, name: str | None = None) -> bool:
        """Whether some process is building an index of this database's stores now;
        with ``name``, whether one is building that set's index."""
        ...

    def ensure_record_index(self, *, timeout: float) -> bool:
        """The ``(table_name, record_timestamp, key)`` index; False if not built now.

        Built on first use of ``orderBy: recordTimestamp``, as an automatic set is:
        without waiting for another process's build, within ``timeout``.
        """
        ...


class ClaimSetCatalog:
    """One process's view of a store's claimable sets, with the automatic policy."""

    def __init__(self, storage: SetStorage, *, automatic: bool) -> None:
        self._storage = storage
        self._automatic = automatic
        self._sets: dict[str, list[StoredSet]] = {}
        #: ``_best``'s answers for the sets in ``_sets``, by table; dropped with them.
        self._choices: dict[str, dict[tuple[Any, ...], ChosenSet | None]] = {}
        self._checked: dict[str, float] = {}
        self._attempted: dict[str, float] = {}
        self._record_index_ready = False
        self._record_index_tried = float("-inf")

    def declare(self, claim_set: ClaimSet) -> StoredSet:
        built = self._storage.build_claim_set(
            claim_set, "declared", timeout=None, automatic_limit=AUTOMATIC_SETS_PER_TABLE
        )
        assert built is not None, "a declared set is built or its build raises"
        self.forget(claim_set.table)
        return built

    def listing(self, table: str | None) -> list[StoredSet]:
        return self._storage.load_claim_sets(table)

    def drop(self, name: str) -> bool:
        dropped = self._storage.drop_claim_set(name)
        self._sets.clear()
        self._choices.clear()
        self._checked.clear()
        return dropped

    def forget(self, table: str) -> None:
        self._sets.pop(table, None)
        self._choices.pop(table, None)
        self._checked.pop(table, None)

    def _reload(self, table: str, now: float) -> None:
        self._checked[table] = now
        self._sets[table] = self._storage.load_claim_sets(table)
        self._choices.pop(table, None)

    def ensure_record_order(self) -> None:
        """Build the ``record_timestamp`` index once something orders by it (see ``SetStorage``)."""
        now = time.monotonic()
        if self._record_index_ready or now - self._record_index_tried < RETRY_SECONDS:
            return
        self._record_index_tried = now
        self._record_index_ready = self._storage.ensure_record_index(
            timeout=AUTOMATIC_BUILD_SECONDS
        )

    def for_claim(
        self,
        table: str,
        conditions: Sequence[Condition],
        match: str,
        column: OrderColumn,
        *,
        written: Collection[str] = (),
        may_declare: bool,
    ) -> ChosenSet | None:
        """The best ready set for this claim, declaring one first when that is allowed."""
        chosen = self._best(table, conditions, match, column)
        if chosen is not None or not conditions:
            return chosen
        now = time.monotonic()
        if now - self._checked.get(table, float("-inf")) >= REFRESH_SECONDS:
            self._reload(table, now)
            chosen = self._best(table, conditions, match, column)
        if chosen is not None or not (self._automatic and may_declare):
            return chosen
        candidate = automatic_claim_set(table, conditions, match, column, written)
        if candidate is None:
            return None
        if now - self._attempted.get(candidate.identity, float("-inf")) < RETRY_SECONDS:
            return None
        self._attempted[candidate.identity] = now
        known = self._stored(table, candidate.identity)
        if known is not None and known.state == "failed":
            return None  # given up on: declare it to build it without a time limit
        if (
            known is not None
            and known.state == "building"
            and self._storage.build_in_progress(known.name)
        ):
            return self._await_build(table, candidate.identity, conditions, match, column)
        # Not known, or "building" with nobody building it: a build that died (its invalid
        # index is rebuilt) or one that stood aside. Build it here.
        built = self._storage.build_claim_set(
            candidate,
            "automatic",
            timeout=AUTOMATIC_BUILD_SECONDS,
            automatic_limit=AUTOMATIC_SETS_PER_TABLE,
        )
        self._reload(table, now)
        if built is None:  # another process holds the build lock: maybe building this set
            return self._await_build(table, candidate.identity, conditions, match, column)
        log.info(
            "atomic store: declared claimable set %s on table %r (%s) so claims with "
            "this filter skip the rows already consumed; list with claim_sets(), turn "
            "off with auto_claim_sets=False",
            built.name,
            table,
            built.claim_set.to_json()["where"],
        )
        return self._best(table, conditions, match, column)

    def _stored(self, table: str, identity: Any) -> StoredSet | None:
        return next(
            (s for s in self._sets.get(table, ()) if s.claim_set.identity == identity), None
        )

    def _await_build(
        self,
        table: str,
        identity: Any,
        conditions: Sequence[Condition],
        match: str,
        column: OrderColumn,
    ) -> ChosenSet | None:
        """Wait, at most ``AUTOMATIC_BUILD_SECONDS``, for another process's build of this set.

        Claiming meanwhile would walk the table's whole history, slowly, and hold up
        the build itself: ``CREATE INDEX CONCURRENTLY`` waits for every transaction
        older than each of its phases, and on a long history each such claim is one.
        Waiting holds no lock and no snapshot. It ends when the set is ready or
        failed, when nobody builds it any more (a set left "building" by a build
        that died is not waited for while another set is built), when the set is
        still not listed after ``UNLISTED_BUILD_SECONDS`` (the build running is
        another set's), or at the bound; the claim then runs through the set if it
        is ready, unindexed if not.
        A claim that lost the build lock can look before the winner has listed the
        set: it waits for it rather than claiming unindexed meanwhile.
        """
        started = time.monotonic()
        deadline = started + AUTOMATIC_BUILD_SECONDS
        while True:
            known = self._stored(table, identity)
            if known is not None and known.state != "building":
                break
            now = time.monotonic()
            if known is None and now >= started + UNLISTED_BUILD_SECONDS:
                break
            if now >= deadline:
                break
            # Listed: is its build running? Not yet listed: is any build running?
            if not self._storage.build_in_progress(None if known is None else known.name):
                break
            time.sleep(min(build_poll_pause(now - started), deadline - now))
            self._reload(table, time.monotonic())
        return self._best(table, conditions, match, column)

    def _best(
        self, table: str, conditions: Sequence[Condition], match: str, column: OrderColumn
    ) -> ChosenSet | None:
        """The best ready set in this process's list, remembered until the list is replaced.

        The answer depends only on the list and on the conditions' planner
        identities (``condition_key``: path, operator, canonical value text),
        so an equal filter gets the same answer without matching every set again.
        """
        choices = self._choices.setdefault(table, {})
        key = (tuple(condition_key(c) for c in conditions), match, column)
        try:
            return choices[key]
        except KeyError:
            pass
        chosen = self._match(table, conditions, match, column)
        if len(choices) >= MAX_REMEMBERED_CHOICES:
            choices.clear()
        choices[key] = chosen
        return chosen

    def _match(
        self, table: str, conditions: Sequence[Condition], match: str, column: OrderColumn
    ) -> ChosenSet | None:
        best: tuple[tuple[int, bool], ChosenSet] | None = None
        for stored in self._sets.get(table, ()):
            if stored.state != "ready":
                continue
            inline = covered_conditions(stored.claim_set, table, conditions, match)
            if inline is None:
                continue
            rank = (len(inline), stored.claim_set.column == column)
            if best is None or rank > best[0]:
                claim_set = stored.claim_set
                predicate = claim_set.conditions if claim_set.disjunctive else None
                best = (rank, ChosenSet(stored.name, inline, predicate))
        return None if best is None else best[1]
