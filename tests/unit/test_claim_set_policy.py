"""The automatic claimable-set policy (``store/claim_sets.py``) against an in-memory catalog.

The policy is pure: what a backend stores and builds is behind ``SetStorage``.
This storage is a stand-in for "another process is building the set", which a
real database shows only for the milliseconds a build takes; the PostgreSQL side
of it (``build_in_progress`` reading a set's lock, a builder killed mid-build) is
tested against a real server in tests/integration/test_claim_set_builds.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from airflow_atomic_store.spec import parse_where
from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.store import claim_sets
from airflow_atomic_store.store.claim_sets import BuildRequest, ClaimSetCatalog, StoredSet

PENDING = parse_where([{"field": "status", "operator": "equals", "value": "pending"}])
WRITTEN = {"status", "claimedAt", "claimedBy"}
QUEUE_SET = ClaimSet(PENDING, "all", "created_at")
NAME = QUEUE_SET.index_name("rows")


@dataclass
class Catalog:
    """The store's sets as the database would list them, and builds running elsewhere.

    ``elsewhere_polls``: how many more times ``build_in_progress`` answers True
    before the other process's build of the queue's set ends; it then lists as
    ready, or stays "building" when ``builder_dies``. ``other_build``: another
    set's build holds the build lock for good.
    """

    sets: dict[str, StoredSet] = field(default_factory=dict)
    elsewhere_polls: int = 0
    builder_dies: bool = False
    other_build: bool = False
    builds_here: int = 0
    progress_polls: int = 0
    touched: list[str] = field(default_factory=list)
    idle_drops: int = 0

    def load_claim_sets(self) -> list[StoredSet]:
        return list(self.sets.values())

    def build_claim_set(self, request: BuildRequest) -> StoredSet | None:
        claim_set, origin = request.claim_set, request.origin
        known = self.sets.get(NAME)
        if self.elsewhere_polls > 0 or self.other_build:
            return None  # its set lock, or the build lock, is another process's
        if known is not None and known.state == "failed":
            return None
        self.builds_here += 1
        built = StoredSet(NAME, claim_set, origin, "ready")
        self.sets[NAME] = built
        return built

    def build_in_progress(self, claim_set: ClaimSet) -> bool:
        self.progress_polls += 1
        if self.elsewhere_polls <= 0:
            return False
        self.elsewhere_polls -= 1
        if self.elsewhere_polls == 0 and not self.builder_dies:
            self.sets[NAME] = replace(self.sets[NAME], state="ready")
        return True

    def touch_claim_set(self, name: str) -> bool:
        self.touched.append(name)
        return name in self.sets

    def drop_idle_claim_sets(self, idle_seconds: float) -> list[str]:
        self.idle_drops += 1
        idle = [
            n for n, s in self.sets.items() if s.origin == "automatic" and s.idle >= idle_seconds
        ]
        for name in idle:
            del self.sets[name]
        return idle

    def drop_claim_set(self, name: str) -> bool:
        return self.sets.pop(name, None) is not None

    def ensure_record_index(self, *, timeout: float) -> bool:
        return True

    def building_elsewhere(self, polls: int, *, dies: bool = False) -> None:
        """Another process listed the queue's set and builds it for ``polls`` polls."""
        self.sets[NAME] = StoredSet(NAME, QUEUE_SET, "automatic", "building")
        self.elsewhere_polls = polls
        self.builder_dies = dies


def _policy(catalog: Catalog) -> ClaimSetCatalog:
    return ClaimSetCatalog(catalog, automatic=True)


def _claim(policy: ClaimSetCatalog, table: str = "queue"):  # type: ignore[no-untyped-def]
    return policy.for_claim(table, PENDING, "all", "created_at", written=WRITTEN, may_declare=True)


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claim_sets, "BUILD_POLL_MIN_SECONDS", 0.001)
    monkeypatch.setattr(claim_sets, "BUILD_POLL_MAX_SECONDS", 0.001)


def test_a_claim_waits_for_another_process_building_its_set_then_runs_through_it() -> None:
    catalog = Catalog()
    catalog.building_elsewhere(polls=5)
    chosen = _claim(_policy(catalog))
    assert chosen is not None and chosen.name == NAME
    assert catalog.builds_here == 0
    assert catalog.elsewhere_polls == 0  # it waited until that build was over


def test_a_claim_whose_builder_died_mid_build_builds_the_set_at_once() -> None:
    """Red-team finding: the claims that waited for a builder that died went on
    unindexed for ``RETRY_SECONDS`` (60 s), at seconds per claim on a long history."""
    catalog = Catalog()
    catalog.building_elsewhere(polls=3, dies=True)
    policy = _policy(catalog)
    chosen = _claim(policy)
    assert chosen is not None and chosen.name == NAME
    assert catalog.builds_here == 1
    assert _claim(policy) == chosen  # and the next claim goes through it too


def test_a_set_left_building_by_a_build_that_died_is_built_again() -> None:
    catalog = Catalog()
    catalog.building_elsewhere(polls=0)  # listed as building; nobody builds it
    chosen = _claim(_policy(catalog))
    assert chosen is not None
    assert catalog.builds_here == 1


def test_another_sets_build_is_not_waited_for() -> None:
    """The build lock is another set's, for its whole (long) build: the claim asks
    about its own set once and goes on unindexed."""
    catalog = Catalog(other_build=True)
    catalog.building_elsewhere(polls=0)
    assert _claim(_policy(catalog)) is None
    assert catalog.builds_here == 0
    assert catalog.progress_polls == 1


def test_the_wait_for_another_build_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claim_sets, "AUTOMATIC_BUILD_SECONDS", 0.05)
    catalog = Catalog()
    catalog.building_elsewhere(polls=10**9)  # a build that never ends
    assert _claim(_policy(catalog)) is None  # the claim goes on unindexed
    assert catalog.builds_here == 0


def test_a_failed_set_is_neither_waited_for_nor_built_again() -> None:
    catalog = Catalog()
    catalog.building_elsewhere(polls=0)
    catalog.sets[NAME] = replace(catalog.sets[NAME], state="failed")
    assert _claim(_policy(catalog)) is None
    assert catalog.builds_here == 0
    assert catalog.progress_polls == 0


def test_one_set_serves_the_filter_on_every_table() -> None:
    catalog = Catalog()
    policy = _policy(catalog)
    chosen = {_claim(policy, f"run-{number}") for number in range(50)}
    assert chosen == {_claim(policy)}
    assert catalog.builds_here == 1


def test_idle_automatic_sets_are_dropped_when_the_sets_are_listed() -> None:
    catalog = Catalog()
    old = StoredSet("rows_set_0000000001", QUEUE_SET, "automatic", "ready", None, 1e9)
    declared = replace(old, name="rows_set_0000000002", origin="declared")
    catalog.sets = {old.name: old, declared.name: declared}
    policy = _policy(catalog)
    assert [s.name for s in policy.listing()] == [old.name, declared.name]
    chosen = _claim(policy)
    assert catalog.idle_drops == 1
    assert chosen is not None and chosen.name == declared.name  # declared sets stay


def test_a_set_in_use_is_noted_at_most_once_per_stamp_period() -> None:
    catalog = Catalog()
    catalog.sets[NAME] = StoredSet(NAME, QUEUE_SET, "automatic", "ready", None, 7200.0)
    policy = _policy(catalog)
    for _ in range(5):
        assert _claim(policy) is not None
    assert catalog.touched == [NAME]  # noted two hours after its last use, then not again
    fresh = Catalog()
    fresh.sets[NAME] = StoredSet(NAME, QUEUE_SET, "automatic", "ready", None, 60.0)
    for _ in range(5):
        _claim(_policy(fresh))
    assert fresh.touched == []  # another process noted it a minute ago


def test_a_set_found_gone_when_noted_is_listed_again() -> None:
    catalog = Catalog()
    catalog.sets[NAME] = StoredSet(NAME, QUEUE_SET, "declared", "ready", None, 7200.0)
    policy = _policy(catalog)
    assert _claim(policy) is not None
    del catalog.sets[NAME]  # another process dropped it since
    policy._stamp_due[NAME] = 0.0
    assert _claim(policy) is not None  # noted, found gone, forgotten (the claim is correct)...
    assert catalog.builds_here == 0
    assert _claim(policy) is not None
    assert catalog.builds_here == 1  # ...and the next claim declared it again


@pytest.mark.parametrize(
    ("waited", "expected"), [(0.0, 0.01), (0.2, 0.01), (1.0, 0.05), (60.0, 0.25)]
)
def test_a_waiting_claim_looks_again_after_a_twentieth_of_its_wait_within_bounds(
    monkeypatch: pytest.MonkeyPatch, waited: float, expected: float
) -> None:
    monkeypatch.setattr(claim_sets, "BUILD_POLL_MIN_SECONDS", 0.01)
    monkeypatch.setattr(claim_sets, "BUILD_POLL_MAX_SECONDS", 0.25)
    assert claim_sets.build_poll_pause(waited) == pytest.approx(expected)
