"""What the claimable-set policy and the backends exchange (``store/claim_sets.py``).

A set is store-wide: one partial index per filter, keyed by logical table first,
shared by every table whose claims use that filter (``spec/claim_sets.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from airflow_atomic_store.spec import Condition
from airflow_atomic_store.spec.claim_sets import ClaimSet, parse_claim_set

Origin = Literal["declared", "automatic"]
State = Literal["ready", "building", "failed"]


@dataclass(frozen=True)
class StoredSet:
    """A set as the store's catalog holds it; ``idle``: seconds since a claim last used it."""

    name: str
    claim_set: ClaimSet
    origin: Origin
    state: State
    problem: str | None = None
    idle: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            **self.claim_set.to_json(),
            "origin": self.origin,
            "state": self.state,
            "problem": self.problem,
            "idle_seconds": round(self.idle),
        }


def stored_set(
    name: str,
    spec: dict[str, Any],
    origin: Origin,
    problem: str | None,
    index_ready: bool,
    idle: float | None = None,
) -> StoredSet:
    """A catalog row as a :class:`StoredSet`; its spec is validated again on the way in."""
    claim_set = parse_claim_set(spec["where"], spec["match"], spec["order_by"])
    state: State = "failed" if problem else ("ready" if index_ready else "building")
    return StoredSet(name, claim_set, origin, state, problem, max(0.0, float(idle or 0.0)))


@dataclass(frozen=True)
class ChosenSet:
    """The set a claim runs against: its index and which conditions become literals.

    ``predicate`` is a disjunctive set's conditions in its index predicate's
    order. A claim through such a set is an ``any`` of the same conditions,
    perhaps in another order or repeated, and SQLite proves an ``OR`` predicate
    only from the same terms in the same order, so the claim writes the set's
    conditions in place of its own: the same filter. The name decides the set,
    so ``predicate`` takes no part in comparing (it holds unhashable values).
    The claim's table stays a bound parameter: the index leads with it.
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


@dataclass(frozen=True)
class BuildRequest:
    """One set to record and build, and how patiently (``SetStorage.build_claim_set``).

    ``timeout`` None (a declared set) waits for other builds and for the build
    itself however long they take, and raises on failure. With a timeout (an
    automatic set) the backend does not wait for another process's build,
    records a build that fails for good, and builds no new set while the store
    has ``automatic_limit`` automatic sets none of which is idle (unused for
    ``idle_seconds``; an idle one is dropped to make room). One object, so a new
    build option is a field here, not a parameter in every backend's signature.
    """

    claim_set: ClaimSet
    origin: Origin
    timeout: float | None
    automatic_limit: int
    idle_seconds: float


class SetStorage(Protocol):
    """What a backend does for claimable sets (the policy decides when)."""

    def load_claim_sets(self) -> list[StoredSet]:
        """Every set of the store, with its state and how long it has been idle."""
        ...

    def build_claim_set(self, request: BuildRequest) -> StoredSet | None:
        """Record and build the set's index as :class:`BuildRequest` says; None when
        it was not built now."""
        ...

    def drop_claim_set(self, name: str) -> bool: ...

    def build_in_progress(self, claim_set: ClaimSet) -> bool:
        """Whether a live process is building this set's index now."""
        ...

    def touch_claim_set(self, name: str) -> bool:
        """Note that a claim used the set now; False when the set is no longer listed."""
        ...

    def drop_idle_claim_sets(self, idle_seconds: float) -> list[str]:
        """Drop the automatic sets no claim used for ``idle_seconds``; their names.

        Never waits for another process's build; a drop that would wait for open
        transactions stands aside and is tried again later.
        """
        ...

    def ensure_record_index(self, *, timeout: float) -> bool:
        """The ``(table, record_timestamp, key)`` index; False if not built now.

        Built on first use of ``orderBy: recordTimestamp``, as an automatic set is:
        without waiting for another process's build, within ``timeout``.
        """
        ...
