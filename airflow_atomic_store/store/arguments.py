"""Argument handling shared by the atomic primitives."""

from __future__ import annotations

from typing import Any

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec import (
    CLAIM_LIMIT,
    Mutation,
    parse_limit,
    parse_match,
    parse_mutations,
    parse_ordering,
    parse_return_fields,
    parse_table,
    parse_where,
)
from airflow_atomic_store.spec.memo import Memo
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
