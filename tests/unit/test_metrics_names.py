"""What the operators' metrics are called (pure: no Airflow, no database)."""

from __future__ import annotations

import pytest

from airflow_atomic_store.exceptions import (
    AccessDeniedError,
    ConnectionConfigError,
    IdempotencyKeyError,
    MutationError,
    SpecError,
    StoreUnavailableError,
)
from airflow_atomic_store.metrics import error_kind, name_part


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (SpecError("where", "bad"), "spec"),
        (MutationError("n", "not a number"), "mutation"),
        (IdempotencyKeyError("k", "claim", "jobs", ""), "idempotency_key"),
        (AccessDeniedError("refused"), "access_denied"),  # before its base class
        (ConnectionConfigError("no such connection"), "connection"),
        (StoreUnavailableError("down"), "store_unavailable"),
        (RuntimeError("boom"), "other"),
    ],
)
def test_each_error_is_counted_under_its_kind(error: Exception, kind: str) -> None:
    assert error_kind(error) == kind


@pytest.mark.parametrize(
    ("table", "part"),
    [
        ("jobs", "jobs"),
        ("counters.daily", "counters__daily"),  # a dot would add a StatsD level
        ("émoji queue/ä", "_moji_queue__"),
        ("a-b_c", "a-b_c"),
    ],
)
def test_a_table_name_becomes_one_segment_of_a_metric_name(table: str, part: str) -> None:
    assert name_part(table) == part
