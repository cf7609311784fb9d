"""Which indexes a store treats as its own sets': ``drop_claim_set`` drops no other;
and how a set's name is proposed when 40 bits of hash are not enough."""

from __future__ import annotations

from airflow_atomic_store.spec.claim_sets import parse_claim_set
from airflow_atomic_store.store.contract import is_set_index

PENDING = [{"field": "status", "operator": "equals", "value": "pending"}]
#: Two sets whose first proposed names are the same: 40 bits of SHA-256 collide
#: after about a million sets (this pair took 1.3 s to find).
COLLIDING = (
    [{"field": "status", "operator": "equals", "value": "s721947"}],
    [{"field": "status", "operator": "equals", "value": "s763502"}],
)


def test_a_sets_own_index_name_is_recognised():
    name = parse_claim_set(PENDING, "all", "createdAt").index_name("jobs")
    assert is_set_index("jobs", name)
    assert is_set_index("jobs", parse_claim_set(PENDING, "all", "createdAt").index_name("jobs", 3))


def test_the_set_index_of_a_storage_table_whose_name_extends_this_one_is_not():
    """Store ``jobs`` used to drop ``jobs_set_set_<hash>``, an index of store ``jobs_set``."""
    other = parse_claim_set(PENDING, "all", "createdAt").index_name("jobs_set")
    assert not is_set_index("jobs", other)
    assert is_set_index("jobs_set", other)


def test_the_stores_other_indexes_are_not_sets():
    for name in ("jobs_pkey", "jobs_created_idx", "jobs_record_idx", "jobs_set_", "jobs_set_xyz"):
        assert not is_set_index("jobs", name)


def test_two_sets_can_share_a_first_name_and_their_next_proposals_differ():
    first, second = (parse_claim_set(where, "all", "createdAt") for where in COLLIDING)
    assert first.identity != second.identity
    assert first.index_name("t" * 48) == second.index_name("t" * 48)
    assert len(first.index_name("t" * 48, 15)) <= 63
    assert first.index_name("jobs", 1) != second.index_name("jobs", 1)
    assert second.index_name("jobs", 1) != second.index_name("jobs")
