"""Which claimable set serves a claim, and when the store declares, or drops, one by itself.

One policy for both backends; the backends only store, build, list and drop.
A claim never depends on a set for correctness: with or without one it runs
the same filter. A set only lets the database walk the claimable rows instead
of the table's whole history.

Sets are store-wide, one per filter (``spec/claim_sets.py``), and the automatic
ones are bounded for the whole store: ``MAX_AUTOMATIC_SETS``. Every index on the
rows table is work for every write of every logical table, so no number of
logical tables, nor of filters, may add more than that. A set no claim used for
``IDLE_SECONDS`` is idle: the next process that lists the sets (each Airflow
task does on its first claim), or a build that finds the bound reached, drops it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from typing import Any

from airflow_atomic_store.spec import Condition
from airflow_atomic_store.spec.claim_sets import (
    ClaimSet,
    automatic_claim_set,
    condition_key,
    covered_conditions,
)
from airflow_atomic_store.spec.options import OrderColumn
from airflow_atomic_store.store.claim_set_types import (
    BuildRequest,
    ChosenSet,
    Origin,
    SetStorage,
    State,
    StoredSet,
    stored_set,
)

__all__ = [
    "BuildRequest",
    "ChosenSet",
    "ClaimSetCatalog",
    "Origin",
    "SetStorage",
    "State",
    "StoredSet",
    "stored_set",
]

log = logging.getLogger("airflow_atomic_store.store")

#: Most sets the store declares by itself, for the whole store (declared ones are the
#: user's and not counted). A write statement takes a lock on the rows table and on
#: each of its indexes, and PostgreSQL keeps 16 of a session's locks on its fast path:
#: the table, its primary key, the ``created_at`` and ``record_timestamp`` indexes and
#: eight sets stay within it. Measured (one process, PostgreSQL 15, medians): a ``put``
#: took 0.141 ms with no set, 0.155 ms with 8, 0.170 ms with 16 and 0.788 ms with 300;
#: on SQLite 0.037, 0.027, 0.039 and 0.447 ms.
MAX_AUTOMATIC_SETS = 8
#: An automatic set that no claim, count or query used for this long is idle, and dropped.
IDLE_SECONDS = 24 * 3600.0
#: How often a process notes in the catalog that it uses a set (at most; a set noted
#: within this long is not noted again), so that a set in use is never idle.
STAMP_SECONDS = 3600.0
#: Longest a claim waits for a set the store builds for it (PostgreSQL), whichever
#: process builds it; a build of its own that takes longer is abandoned and recorded
#: as failed, and claims go on unindexed. (A build that would wait for other sessions'
#: open transactions stands aside after 2 s instead, unrecorded, and is tried again.)
AUTOMATIC_BUILD_SECONDS = 30.0
#: How long a process trusts its list of the store's sets when none serves a claim.
REFRESH_SECONDS = 10.0
#: Most filters whose chosen set a process remembers (``ClaimSetCatalog._best``).
MAX_REMEMBERED_CHOICES = 256
#: How long a process waits before trying again to declare a set it could not build.
RETRY_SECONDS = 60.0
#: How often a claim waiting for another process's build of its set looks again:
#: a twentieth of the time it has waited so far, within these bounds (``build_poll_pause``).
BUILD_POLL_MIN_SECONDS = 0.01
BUILD_POLL_MAX_SECONDS = 0.25
BUILD_POLL_FRACTION = 0.05


def build_request(claim_set: ClaimSet, origin: Origin, timeout: float | None) -> BuildRequest:
    """A build within the store's bounds: ``MAX_AUTOMATIC_SETS``, idle after ``IDLE_SECONDS``."""
    return BuildRequest(claim_set, origin, timeout, MAX_AUTOMATIC_SETS, IDLE_SECONDS)


def build_poll_pause(waited: float) -> float:
    """The pause before a waiting claim looks again at a build, after ``waited`` seconds.

    A short build (a queue's set over a few hundred thousand rows takes about
    a tenth of a second) is noticed within 10 ms of its end: every claimer's
    first batch waits on it. A long one (millions of rows) is looked at four
    times a second by each waiting worker, not twenty.
    """
    return min(BUILD_POLL_MAX_SECONDS, max(BUILD_POLL_MIN_SECONDS, waited * BUILD_POLL_FRACTION))


class ClaimSetCatalog:
    """One process's view of a store's claimable sets, with the automatic policy."""

    def __init__(self, storage: SetStorage, *, automatic: bool) -> None:
        self._storage = storage
        self._automatic = automatic
        self._sets: list[StoredSet] = []
        #: ``_best``'s answers for the sets in ``_sets``; dropped with them.
        self._choices: dict[tuple[Any, ...], ChosenSet | None] = {}
        self._checked = float("-inf")
        self._attempted: dict[str, float] = {}
        #: When (monotonic) each listed set is next to be noted as used (``_used``).
        self._stamp_due: dict[str, float] = {}
        self._record_index_ready = False
        self._record_index_tried = float("-inf")

    def declare(self, claim_set: ClaimSet) -> StoredSet:
        built = self._storage.build_claim_set(build_request(claim_set, "declared", None))
        assert built is not None, "a declared set is built or its build raises"
        self.forget()
        return built

    def listing(self) -> list[StoredSet]:
        return self._storage.load_claim_sets()

    def drop(self, name: str) -> bool:
        dropped = self._storage.drop_claim_set(name)
        self.forget()
        return dropped

    def forget(self, table: str | None = None) -> None:
        """Forget the listed sets (all of them: sets serve every table, ``table`` is ignored)."""
        self._sets = []
        self._choices.clear()
        self._stamp_due.clear()
        self._checked = float("-inf")

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
        chosen = self._best(conditions, match, column)
        if chosen is None and conditions:
            chosen = self._find_or_declare(table, conditions, match, column, written, may_declare)
        if chosen is not None:
            self._used(chosen.name)
        return chosen

    def _find_or_declare(
        self,
        table: str,
        conditions: Sequence[Condition],
        match: str,
        column: OrderColumn,
        written: Collection[str],
        may_declare: bool,
    ) -> ChosenSet | None:
        now = time.monotonic()
        if now - self._checked >= REFRESH_SECONDS:
            self._reload()
            chosen = self._best(conditions, match, column)
            if chosen is not None:
                return chosen
        if not (self._automatic and may_declare):
            return None
        candidate = automatic_claim_set(conditions, match, column, written)
        if candidate is None:
            return None
        if now - self._attempted.get(candidate.identity, float("-inf")) < RETRY_SECONDS:
            return None
        if any(
            s.state == "failed" and s.claim_set.identity == candidate.identity for s in self._sets
        ):
            return None  # given up on: declare it to build it without a time limit
        self._attempted[candidate.identity] = now
        return self._declare_automatically(table, candidate, conditions, match, column)

    def _declare_automatically(
        self,
        table: str,
        candidate: ClaimSet,
        conditions: Sequence[Condition],
        match: str,
        column: OrderColumn,
    ) -> ChosenSet | None:
        """Build the set, or wait (at most ``AUTOMATIC_BUILD_SECONDS``) for the live
        process that builds it.

        Waiting holds no lock and no snapshot; claiming meanwhile would walk the
        table's whole history and hold the build up (``CREATE INDEX CONCURRENTLY``
        waits for every older transaction). A builder that dies (its set lock goes
        with its session) or stands aside leaves the set unbuilt: the claim then
        builds it at once.
        """
        deadline = time.monotonic() + AUTOMATIC_BUILD_SECONDS
        while True:
            # A build of its own gets the whole bound: "too slow" is recorded for good,
            # so it must mean the build took that long, not that the claim waited first.
            built = self._storage.build_claim_set(
                build_request(candidate, "automatic", AUTOMATIC_BUILD_SECONDS)
            )
            if built is not None:
                log.info(
                    "atomic store: declared claimable set %s (%s, first claimed on table %r) so "
                    "claims with this filter skip the rows already consumed; list with "
                    "claim_sets(), turn off with auto_claim_sets=False",
                    built.name,
                    candidate.to_json()["where"],
                    table,
                )
                self._reload()
                return self._best(conditions, match, column)
            if not self._storage.build_in_progress(candidate):
                self._reload()  # refused (the bound, a failure) or another set's build runs
                return self._best(conditions, match, column)
            self._await_build(candidate, deadline)
            self._reload()
            chosen = self._best(conditions, match, column)
            if chosen is not None or time.monotonic() >= deadline:
                return chosen

    def _await_build(self, candidate: ClaimSet, deadline: float) -> None:
        """Wait while a live process builds this set, at most until ``deadline``."""
        started = time.monotonic()
        while self._storage.build_in_progress(candidate):
            now = time.monotonic()
            if now >= deadline:
                return
            time.sleep(min(build_poll_pause(now - started), deadline - now))

    def _reload(self) -> None:
        """List the store's sets afresh; drop idle automatic ones first if there are any."""
        self._sets = self._storage.load_claim_sets()
        idle = self._automatic and any(_idle(s) for s in self._sets)
        if idle and self._storage.drop_idle_claim_sets(IDLE_SECONDS):
            self._sets = self._storage.load_claim_sets()
        now = time.monotonic()
        self._checked = now
        self._choices.clear()
        self._stamp_due = {s.name: now + max(0.0, STAMP_SECONDS - s.idle) for s in self._sets}

    def _used(self, name: str) -> None:
        """Note in the catalog, at most every ``STAMP_SECONDS``, that a claim used the set."""
        due = self._stamp_due.get(name)
        if due is None or time.monotonic() < due:
            return
        self._stamp_due[name] = time.monotonic() + STAMP_SECONDS
        if not self._storage.touch_claim_set(name):
            self.forget()  # dropped by another process: list the sets again next time

    def _best(
        self, conditions: Sequence[Condition], match: str, column: OrderColumn
    ) -> ChosenSet | None:
        """The best ready set in this process's list, remembered until the list is replaced.

        The answer depends only on the list and on the conditions' planner
        identities (``condition_key``: path, operator, canonical value text),
        so an equal filter gets the same answer without matching every set again.
        """
        key = (tuple(condition_key(c) for c in conditions), match, column)
        try:
            return self._choices[key]
        except KeyError:
            pass
        chosen = self._match(conditions, match, column)
        if len(self._choices) >= MAX_REMEMBERED_CHOICES:
            self._choices.clear()
        self._choices[key] = chosen
        return chosen

    def _match(
        self, conditions: Sequence[Condition], match: str, column: OrderColumn
    ) -> ChosenSet | None:
        best: tuple[tuple[int, bool], ChosenSet] | None = None
        for stored in self._sets:
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


def _idle(stored: StoredSet) -> bool:
    return stored.origin == "automatic" and stored.idle >= IDLE_SECONDS
