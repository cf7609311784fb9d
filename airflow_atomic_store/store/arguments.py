"""Argument handling shared by the atomic primitives."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from typing import Any

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec import (
    CLAIM_LIMIT,
    Condition,
    Mutation,
    check_text,
    parse_limit,
    parse_match,
    parse_mutations,
    parse_ordering,
    parse_return_fields,
    parse_table,
    parse_where,
)
from airflow_atomic_store.spec.memo import Memo
from airflow_atomic_store.store.claim_defaults import DEFAULT_WRITTEN, default_claim_mutations
from airflow_atomic_store.store.receipts import Receipt


def with_replayed(
    result: dict[str, Any], receipt: Receipt | None, replayed: bool
) -> dict[str, Any]:
    """Keyed calls say whether they applied (``replayed`` False) or replayed a receipt."""
    if receipt is not None:
        result["replayed"] = replayed
    return result


def _parse_claim_options(raw: tuple[Any, ...], *, field: str) -> tuple[Any, ...]:
    """``atomic_claim``'s options but the mutations, parsed in the order errors are reported."""
    table, where, match, order_by, direction, limit, return_fields = raw
    return (
        parse_table(table),
        parse_where(where),
        parse_match(match),
        parse_ordering(order_by, direction),
        parse_limit(limit, CLAIM_LIMIT),
        parse_return_fields(return_fields),
    )


#: A dispatcher claims with the same options on every call: parsed once (``spec/memo.py``).
claim_options = Memo(_parse_claim_options)


def required_mutations(mutations: Any, field: str) -> tuple[Mutation, ...]:
    parsed = parse_mutations(mutations, field=field)
    if not parsed:
        raise SpecError(field, "at least one mutation is required")
    return parsed


def claim_mutations(
    claim_mode: str,
    mutations: Any,
    execution_id: Any,
    conditions: Sequence[Condition],
) -> tuple[tuple[Mutation, ...], Collection[str]]:
    """A claim's mutations and the top-level fields they write (``ClaimSetCatalog.for_claim``).

    A delete-claim takes none, and its rows leave every filter: a set over any of its
    conditions stays small. Without mutations a mark-claim gets the default claim
    mutation, ``claimedBy`` the execution id (a fresh unique one when none is given).
    """
    if claim_mode == "delete":
        if mutations is not None:
            raise SpecError(
                "mutations", "a claim with mode 'delete' removes its rows and takes no mutations"
            )
        return (), {condition.path.top_level for condition in conditions}
    if mutations is not None:
        parsed = required_mutations(mutations, "mutations")
        return parsed, {mutation.path.top_level for mutation in parsed}
    if execution_id is None:
        return default_claim_mutations(f"claim-{uuid.uuid4()}"), DEFAULT_WRITTEN
    if not isinstance(execution_id, str) or not execution_id:
        raise SpecError("execution_id", f"must be a non-empty string, got {execution_id!r}")
    check_text(execution_id, "execution_id", "execution ids")
    return default_claim_mutations(execution_id, reused_id=True), DEFAULT_WRITTEN
