"""Which indexes a store treats as its own sets': ``drop_claim_set`` drops no other."""

from __future__ import annotations

from airflow_atomic_store.spec.claim_sets import parse_claim_set
from airflow_atomic_store.store.backend import is_set_index

PENDING = [{"field": "status", "operator": "equals", "value": "pending"}]


def test_a_sets_own_index_name_is_recognised():
    name = parse_claim_set("queue", PENDING, "all", "createdAt").index_name("jobs")
    assert is_set_index("jobs", name)


def test_the_set_index_of_a_storage_table_whose_name_extends_this_one_is_not():
    """Store ``jobs`` used to drop ``jobs_set_set_<hash>``, an index of store ``jobs_set``."""
    other = parse_claim_set("queue", PENDING, "all", "createdAt").index_name("jobs_set")
    assert not is_set_index("jobs", other)
    assert is_set_index("jobs_set", other)


def test_the_stores_other_indexes_are_not_sets():
    for name in ("jobs_pkey", "jobs_created_idx", "jobs_record_idx", "jobs_set_", "jobs_set_xyz"):
        assert not is_set_index("jobs", name)
