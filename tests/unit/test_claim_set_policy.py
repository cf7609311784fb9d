"""The automatic claimable-set policy (``store/claim_sets.py``) against an in-memory catalog.

The policy is pure: what a backend stores and builds is behind ``SetStorage``.
This storage is a stand-in for "another process is building the set", which a
real database shows only for the milliseconds a build takes; the PostgreSQL side
of it (``build_in_progress`` reading the build lock) is tested against a real
server in tests/integration/test_claim_sets.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from airflow_atomic_store.spec import parse_where
from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.store import claim_sets
from airflow_atomic_store.store.claim_sets import ClaimSetCatalog, Origin, StoredSet

PENDING = parse_where([{"field": "status", "operator": "equals", "value": "pending"}])
WRITTEN = {"status", "claimedAt", "claimedBy"}


@dataclass
class Catalog:
    """One table's sets as the database would list them, and a build running elsewhere.

    ``elsewhere_polls``: how many more times ``build_in_progress`` answers True
    before the other process's build finishes (its set then lists as ready).
    """

    sets: dict[str, StoredSet] = field(default_factory=dict)
    elsewhere_polls: int = 0
    builds_here: int = 0
    lock_held_elsewhere: bool = False
    winner_pending: bool = False  # another process took the build lock, records its set next
    #: Another process holds the build lock and lists its set only after this many polls.
    unlisted_polls: int = 0
    #: Another process holds the build lock for good, building another table's set.
    other_set_building: bool = False
    progress_polls: int = 0

    def load_claim_sets(self, table: str | None) -> list[StoredSet]:
        return [s for s in self.sets.values() if table is None or s.claim_set.table == table]

    def build_claim_set(
        self, claim_set: ClaimSet, origin: Origin, *, timeout: float | None, automatic_limit: int
    ) -> StoredSet | None:
        if self.winner_pending:  # lost the race: by now the winner has recorded the set
            self.winner_pending = False
            self.record_building_elsewhere(polls=3)
        if self.lock_held_elsewhere or self.unlisted_polls > 0:
            return None
        self.builds_here += 1
        built = StoredSet(claim_set.index_name("rows"), claim_set, origin, "ready")
        self.sets[built.name] = built
        return built

    def build_in_progress(self, name: str | None = None) -> bool:
        self.progress_polls += 1
        if self.other_set_building and name is None:
            return True
        if self.unlisted_polls > 0:
            self.unlisted_polls -= 1
            if self.unlisted_polls == 0:  # the winner lists the set, then builds it
                self.record_building_elsewhere(polls=3)
            return True
        if self.elsewhere_polls <= 0:
            return False
        self.elsewhere_polls -= 1
        if self.elsewhere_polls == 0:  # the other process's build just finished
            self.sets = {name: _with_state(s, "ready") for name, s in self.sets.items()}
            self.lock_held_elsewhere = False
        return True

    def drop_claim_set(self, name: str) -> bool:
        return self.sets.pop(name, None) is not None

    def ensure_record_index(self, *, timeout: float) -> bool:
        return True

    def record_building_elsewhere(self, polls: int) -> None:
        """Another process recorded the queue's set and is building it for ``polls`` polls."""
        claim_set = ClaimSet("queue", PENDING, "all", "created_at")
        name = claim_set.index_name("rows")
        self.sets[name] = StoredSet(name, claim_set, "automatic", "building")
        self.elsewhere_polls = polls
        self.lock_held_elsewhere = polls > 0


def _with_state(stored: StoredSet, state: str) -> StoredSet:
    return StoredSet(stored.name, stored.claim_set, stored.origin, state)  # type: ignore[arg-type]


def _chosen(catalog: Catalog):  # type: ignore[no-untyped-def]
    policy = ClaimSetCatalog(catalog, automatic=True)
    return policy.for_claim(
        "queue", PENDING, "all", "created_at", written=WRITTEN, may_declare=True
    )


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claim_sets, "BUILD_POLL_MIN_SECONDS", 0.001)
    monkeypatch.setattr(claim_sets, "BUILD_POLL_MAX_SECONDS", 0.001)


def test_a_claim_waits_for_another_process_building_its_set_then_runs_through_it() -> None:
    catalog = Catalog()
    catalog.record_building_elsewhere(polls=5)
    chosen = _chosen(catalog)
    assert chosen is not None and chosen.name in catalog.sets
    assert catalog.builds_here == 0
    assert catalog.elsewhere_polls == 0  # it waited until that build was over


def test_a_claim_that_loses_the_race_to_build_waits_for_the_winner() -> None:
    catalog = Catalog(winner_pending=True)  # nothing listed yet; the winner has the lock
    chosen = _chosen(catalog)
    assert chosen is not None and chosen.name in catalog.sets
    assert catalog.builds_here == 0


def test_a_claim_that_looks_before_the_winner_lists_its_set_still_waits_for_it() -> None:
    catalog = Catalog(unlisted_polls=4)  # the lock is taken, the catalog lists nothing yet
    chosen = _chosen(catalog)
    assert chosen is not None and chosen.name in catalog.sets
    assert catalog.builds_here == 0
    assert catalog.elsewhere_polls == 0  # it waited for the listing, then for the build


def test_a_build_of_another_set_is_not_waited_for_beyond_the_listing_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(claim_sets, "UNLISTED_BUILD_SECONDS", 0.05)
    catalog = Catalog(unlisted_polls=10**9)  # the lock stays held; this set is never listed
    assert _chosen(catalog) is None  # the claim goes on unindexed after the grace
    assert catalog.builds_here == 0
    assert catalog.unlisted_polls > 10**9 - 1000  # it did not wait for that build to end


def test_a_set_left_building_by_a_build_that_died_is_built_again() -> None:
    catalog = Catalog()
    catalog.record_building_elsewhere(polls=0)  # listed as building; nobody builds it
    chosen = _chosen(catalog)
    assert chosen is not None
    assert catalog.builds_here == 1


def test_a_set_left_building_by_a_dead_build_is_not_waited_for_while_another_is_built() -> None:
    """Another set's build holds the build lock for its whole (long) build: a claim
    whose set a died build left "building" used to wait up to the bound for it."""
    catalog = Catalog(other_set_building=True, lock_held_elsewhere=True)
    catalog.record_building_elsewhere(polls=0)  # listed as building; nobody builds it
    catalog.lock_held_elsewhere = True  # ... and the build lock is another set's
    assert _chosen(catalog) is None  # not built here (the lock is taken): unindexed
    assert catalog.builds_here == 0
    assert catalog.progress_polls <= 2  # it asked about its own set and went on


def test_the_wait_for_another_build_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claim_sets, "AUTOMATIC_BUILD_SECONDS", 0.05)
    catalog = Catalog()
    catalog.record_building_elsewhere(polls=10**9)  # a build that never ends
    assert _chosen(catalog) is None  # the claim goes on unindexed
    assert catalog.builds_here == 0


def test_a_failed_set_is_neither_waited_for_nor_built_again() -> None:
    catalog = Catalog()
    catalog.record_building_elsewhere(polls=0)
    name = next(iter(catalog.sets))
    catalog.sets[name] = _with_state(catalog.sets[name], "failed")
    assert _chosen(catalog) is None
    assert catalog.builds_here == 0


@pytest.mark.parametrize(
    ("waited", "expected"), [(0.0, 0.01), (0.2, 0.01), (1.0, 0.05), (60.0, 0.25)]
)
def test_a_waiting_claim_looks_again_after_a_twentieth_of_its_wait_within_bounds(
    monkeypatch: pytest.MonkeyPatch, waited: float, expected: float
) -> None:
    monkeypatch.setattr(claim_sets, "BUILD_POLL_MIN_SECONDS", 0.01)
    monkeypatch.setattr(claim_sets, "BUILD_POLL_MAX_SECONDS", 0.25)
    assert claim_sets.build_poll_pause(waited) == pytest.approx(expected)
