"""SQL for a row's value after its mutations: plain SQL where it can, else the function."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from airflow_atomic_store.spec import Mutation
from airflow_atomic_store.store.postgres import schema
from airflow_atomic_store.store.postgres.jsonb import jsonb
from airflow_atomic_store.store.postgres.where import path_sql


def mutations_sql(mutations: Sequence[Mutation], row: str) -> tuple[str, list[Any]]:
    """SQL for the ``row`` value after ``mutations``, and its parameters in order.

    The PL/pgSQL apply function handles every mutation, but calling it is slow
    enough to matter (docs/benchmarks.md), so the common shapes stay in plain
    SQL. Row values are always objects, so
    top-level fields merge into them with ``jsonb_concat`` (the function
    behind ``||``):

    - only ``set``s: one object, a later ``set`` of a field winning as in the
      reference ``apply``;
    - ``set``s and ``increment``s of distinct fields (no mutation sees
      another's result): ``jsonb_build_object`` with each increment inline
      (see ``_increment_sql``).

    Anything else (nested paths, a field mutated twice) runs the function.
    """
    top_level = all(
        len(m.path.segments) == 1 and isinstance(m.path.segments[0], str) for m in mutations
    )
    if top_level and all(m.operation == "set" for m in mutations):
        merged = {m.path.segments[0]: m.value for m in mutations}
        return f"jsonb_concat({row}, %s)", [jsonb(merged)]
    if top_level and len({m.path.segments for m in mutations}) == len(mutations):
        pairs: list[str] = []
        params: list[Any] = []
        for mutation in mutations:
            pairs.append("%s::text")
            params.append(mutation.path.segments[0])
            if mutation.operation == "set":
                pairs.append("%s::jsonb")
                params.append(jsonb(mutation.value))
            else:
                expression, increment_params = _increment_sql(row, mutation)
                pairs.append(expression)
                params.extend(increment_params)
        return f"jsonb_concat({row}, jsonb_build_object({', '.join(pairs)}))", params
    return (
        f"{schema.APPLY_FUNCTION}({row}, %s)",
        [jsonb([mutation.to_json() for mutation in mutations])],
    )


#: The 64-bit range an integer increment's result must stay in (as in the reference).
_INT64_RANGE = "BETWEEN -9223372036854775808 AND 9223372036854775807"


def _increment_sql(row: str, mutation: Mutation) -> tuple[str, list[Any]]:
    """An increment of a top-level field, and its parameters in order.

    An integer field plus an integer delta whose sum fits 64 bits (a counter, a
    token bucket) is summed in SQL. Every other case — a missing or null field,
    a float on either side, a non-number, an overflow — goes to
    ``atomic_store_add_v1``, which owns those rules and their errors; the SQL
    branch computes exactly what that function's integer branch would. ``CASE``
    tests the type before the numeric cast sees the value, and ``COALESCE``
    calls the function only when that branch gave nothing.
    """
    current = path_sql(mutation.path.segments, root=row).json
    delta = mutation.value
    if isinstance(delta, bool) or not isinstance(delta, int):
        return f"{schema.ADD_FUNCTION}({current}, %s, %s)", [jsonb(delta), mutation.path.text]
    return _integer_increment_sql(current), [delta, delta, delta, mutation.path.text]


@lru_cache(maxsize=256)
def _integer_increment_sql(current: str) -> str:
    total = f"({current}::numeric + %s::numeric)"
    return (
        f"COALESCE(CASE WHEN jsonb_typeof({current}) = 'number' THEN "
        f"CASE WHEN scale({current}::numeric) = 0 AND {total} {_INT64_RANGE} "
        f"THEN to_jsonb({total}) END END, "
        f"{schema.ADD_FUNCTION}({current}, to_jsonb(%s::numeric), %s))"
    )
