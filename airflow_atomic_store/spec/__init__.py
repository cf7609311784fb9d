"""The spec layer: pure parsing, validation and the reference evaluator.

Nothing here performs I/O. Every backend compiles what this layer parses,
and the reference ``evaluate``/``apply`` define what the SQL must do.
"""

from __future__ import annotations

from airflow_atomic_store.spec.conditions import (
    MATCH_MODES,
    Condition,
    Match,
    evaluate,
    parse_match,
    parse_where,
)
from airflow_atomic_store.spec.mutations import OPERATIONS, Mutation, apply, parse_mutations
from airflow_atomic_store.spec.options import (
    CLAIM_LIMIT,
    ORDER_COLUMNS,
    QUERY_LIMIT,
    Ordering,
    parse_key,
    parse_limit,
    parse_ordering,
    parse_return_fields,
    parse_table,
    project,
)
from airflow_atomic_store.spec.paths import MISSING, FieldPath, parse_path, resolve
from airflow_atomic_store.spec.predicates import ALIASES, OPERATORS, Operator
from airflow_atomic_store.spec.values import (
    check_json,
    check_object,
    check_text,
    is_number,
    json_equal,
)

__all__ = [
    "ALIASES",
    "CLAIM_LIMIT",
    "MATCH_MODES",
    "MISSING",
    "OPERATIONS",
    "OPERATORS",
    "ORDER_COLUMNS",
    "QUERY_LIMIT",
    "Condition",
    "FieldPath",
    "Match",
    "Mutation",
    "Operator",
    "Ordering",
    "apply",
    "check_json",
    "check_object",
    "check_text",
    "evaluate",
    "is_number",
    "json_equal",
    "parse_key",
    "parse_limit",
    "parse_match",
    "parse_mutations",
    "parse_ordering",
    "parse_path",
    "parse_return_fields",
    "parse_table",
    "parse_where",
    "project",
    "resolve",
]
