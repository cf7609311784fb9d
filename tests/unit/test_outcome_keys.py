"""Keys the operators derive are bounded by construction, readable when they fit: a
delete-mode batch's outcome keys and a deferrable wait's round keys (issue 39)."""

from __future__ import annotations

import hashlib

import pytest

from airflow_atomic_store.operators.batch import outcome_key
from airflow_atomic_store.operators.waiting import Wait
from airflow_atomic_store.spec import parse_key
from airflow_atomic_store.spec.options import MAX_KEY_BYTES
from airflow_atomic_store.store.atomic_store import MAX_KEY_BYTES as RECEIPT_KEY_BYTES
from airflow_atomic_store.store.atomic_store import parse_idempotency_key

PREFIX = "dag/manual__2026-01-01T00:00:00+00:00/process/-1"


def _sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def test_an_outcome_key_that_fits_is_the_readable_prefix_and_row_key() -> None:
    assert outcome_key(PREFIX, "job-1") == f"{PREFIX}/job-1"
    exactly = "k" * (MAX_KEY_BYTES - len(PREFIX) - 1)
    assert outcome_key(PREFIX, exactly) == f"{PREFIX}/{exactly}"


def test_a_row_key_that_would_not_fit_gives_way_to_its_digest() -> None:
    one_too_many = "k" * (MAX_KEY_BYTES - len(PREFIX))
    assert outcome_key(PREFIX, one_too_many) == f"{PREFIX}/{_sha(one_too_many)}"


def test_bytes_are_counted_not_characters() -> None:
    wide = "é" * ((MAX_KEY_BYTES - len(PREFIX)) // 2)  # two bytes each: does not fit
    assert outcome_key(PREFIX, wide) == f"{PREFIX}/{_sha(wide)}"


def test_a_prefix_too_long_for_the_digest_gives_way_to_its_own_digest() -> None:
    prefix = "p" * 1000
    assert outcome_key(prefix, "job-1") == f"{prefix}/job-1"
    assert outcome_key(prefix, "k" * 100) == f"{_sha(prefix)}/{_sha('k' * 100)}"


@pytest.mark.parametrize("prefix_bytes", [1, 60, 900, 1024])
@pytest.mark.parametrize("row_bytes", [1, 500, 1002, 1024])
def test_every_outcome_key_is_a_valid_key_and_the_same_for_the_same_row(
    prefix_bytes: int, row_bytes: int
) -> None:
    prefix, row = "p" * prefix_bytes, "r" * row_bytes
    key = outcome_key(prefix, row)
    assert parse_key(key) == key  # never a SpecError after the claim
    assert len(key.encode()) <= MAX_KEY_BYTES
    assert outcome_key(prefix, row) == key  # a retry finds what an earlier try wrote
    assert outcome_key(prefix, row + "x") != key


@pytest.mark.parametrize("key_bytes", [10, 1014, 1015, 1024])
def test_a_deferrable_waits_round_key_is_a_valid_key_and_the_same_on_every_try(
    key_bytes: int,
) -> None:
    """``<key>/wait-N`` is bounded too: it is made only after round 0 was recorded."""
    key = "k" * key_bytes
    round_key = Wait(None, round=12).key(key)
    assert round_key is not None
    assert parse_idempotency_key(round_key) == round_key
    assert round_key == Wait(None, round=12).key(key)
    assert round_key != Wait(None, round=13).key(key)
    if key_bytes + len("/wait-12") <= RECEIPT_KEY_BYTES:
        assert round_key == f"{key}/wait-12"
    else:
        assert round_key == f"{_sha(key)}/wait-12"
