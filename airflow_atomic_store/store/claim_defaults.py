"""The mutations a claim applies when it is given none."""

from __future__ import annotations

from functools import lru_cache

from airflow_atomic_store import timestamps
from airflow_atomic_store.spec import Mutation, parse_path

_CLAIM_PATHS = {name: parse_path(name, field=name) for name in ("status", "claimedAt", "claimedBy")}
_IN_FLIGHT = Mutation(_CLAIM_PATHS["status"], "set", "in_flight")
#: The fields the default mutations write (the automatic claimable set's test).
DEFAULT_WRITTEN = frozenset(_CLAIM_PATHS)


@lru_cache(maxsize=256)
def _claimed_by(execution_id: str) -> Mutation:
    return Mutation(_CLAIM_PATHS["claimedBy"], "set", execution_id)


def default_claim_mutations(execution_id: str, *, reused_id: bool = False) -> tuple[Mutation, ...]:
    """status → in_flight, claimedAt → now, claimedBy → the execution id.

    The paths are parsed once because this runs on every claim; with ``reused_id``
    (an id the caller passes on every call) the ``claimedBy`` mutation is cached
    too. The caller has validated ``execution_id``.
    """
    by = (
        _claimed_by(execution_id)
        if reused_id
        else Mutation(_CLAIM_PATHS["claimedBy"], "set", execution_id)
    )
    return (_IN_FLIGHT, Mutation(_CLAIM_PATHS["claimedAt"], "set", timestamps.now()), by)
