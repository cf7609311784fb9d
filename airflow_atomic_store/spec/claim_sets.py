"""Claimable sets: the rows a queue's claims take from, in every logical table.

A set is a ``where`` plus the order its claims use. The store keeps one partial
index per set, holding only the rows its ``where`` matches, keyed by logical
table first: so every table whose claims use that filter shares the index, and
a claim walks its own table's claimable rows, never the rows already consumed.
One index per filter, not per table and filter: a store with a logical table per
run or tenant then has as many sets as it has queue filters, not as tables, and
every index on the rows table is work each write does. The planner can use that
index only when it can *prove* the claim's filter implies the index predicate,
which it does from literals in the statement text: so a claim whose conditions
include a set's conditions gets those conditions written as validated literals
(:func:`covered_conditions` says which), and the rest (its table too) stay bound.

Conditions are compared by their canonical JSON text, not Python equality: a
literal ``1`` and ``1.0`` are different constants to the planner, and
``True == 1`` in Python.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec.conditions import Condition, Match, parse_match, parse_where
from airflow_atomic_store.spec.options import OrderColumn, parse_ordering
from airflow_atomic_store.spec.values import dumps, json_type

#: Operators a set may be declared with: their SQL is a plain, immutable
#: comparison that both databases accept in a partial index predicate.
DECLARABLE_OPERATORS = frozenset({"equals", "not_equals", "in", "not_in", "exists", "not_exists"})
#: Bounds on a value written into an index predicate (and into every claim's text).
MAX_LITERAL_CHARS = 256
MAX_IN_ITEMS = 32

_SCALAR_TYPES = frozenset({"null", "boolean", "number", "string"})

ConditionKey = tuple[tuple[Any, ...], str, str]


def condition_key(condition: Condition) -> ConditionKey:
    """What makes two conditions the same constant predicate to a planner."""
    return condition.path.segments, condition.operator.name, dumps(condition.value)


@dataclass(frozen=True)
class ClaimSet:
    """A parsed claimable set: its conditions and the claims' order column."""

    conditions: tuple[Condition, ...]
    match: Match
    column: OrderColumn

    @property
    def disjunctive(self) -> bool:
        """An ``any`` of two or more conditions: only the same ``any`` implies it."""
        return self.match == "any" and len(self.conditions) > 1

    @property
    def keys(self) -> frozenset[ConditionKey]:
        return frozenset(condition_key(c) for c in self.conditions)

    def to_json(self) -> dict[str, Any]:
        """The set as stored in the catalog and shown when sets are listed."""
        return {
            "where": [
                {"field": c.path.text, "operator": c.operator.name}
                | ({"value": c.value} if c.operator.takes_value else {})
                for c in self.conditions
            ],
            "match": self.match,
            "order_by": "createdAt" if self.column == "created_at" else "recordTimestamp",
        }

    @property
    def identity(self) -> str:
        """Canonical text: two sets are the same set exactly when their identities are equal."""
        return dumps(self.to_json())

    def index_name(self, storage_table: str, attempt: int = 0) -> str:
        """A name of at most 63 characters (storage tables have at most 48): 40 bits of hash.

        Two sets can share those bits (one such pair is in tests/unit/test_set_index_names.py):
        declaring the second is then an error that says so, nothing is built
        (``attempt`` names the sets that stores before 0.1.0 built on a collision).
        """
        text = self.identity if attempt == 0 else f"{self.identity}#{attempt}"
        digest = hashlib.sha256(text.encode()).hexdigest()[:10]
        return f"{storage_table}_set_{digest}"


def parse_claim_set(where: Any, match: Any, order_by: Any) -> ClaimSet:
    """A declared set, validated: conditions a partial index can hold, with bounded literals."""
    conditions = parse_where(where)
    if not conditions:
        raise SpecError("where", "a claimable set needs at least one condition")
    for number, condition in enumerate(conditions):
        problem = _literal_problem(condition, DECLARABLE_OPERATORS)
        if problem:
            raise SpecError(f"where[{number}]", problem)
    mode = parse_match(match)
    column = parse_ordering(order_by, "asc").column
    return ClaimSet(_canonical_order(conditions), mode, column)


def covered_conditions(
    claim_set: ClaimSet, conditions: Sequence[Condition], match: str
) -> frozenset[int] | None:
    """Which of a claim's conditions to write as literals so the set's index serves it.

    None when the claim's filter does not imply the set's predicate. An
    ``all`` set is implied by any ``all`` claim that has each of its
    conditions; an ``any`` set (of two or more) only by the same ``any``.
    """
    keys = [condition_key(c) for c in conditions]
    wanted = claim_set.keys
    conjunctive = match == "all" or len(conditions) == 1
    if not claim_set.disjunctive:
        if not conjunctive or not wanted <= set(keys):
            return None
    elif match != "any" or set(keys) != wanted:
        return None
    return frozenset(i for i, key in enumerate(keys) if key in wanted)


def _literal_problem(condition: Condition, operators: frozenset[str]) -> str | None:
    name = condition.operator.name
    if name not in operators:
        return (
            f"operator {name!r} cannot define a claimable set; use {', '.join(sorted(operators))}"
        )
    if not condition.operator.takes_value:
        return None
    items = condition.value if condition.operator.positive == "in" else [condition.value]
    if not items or len(items) > MAX_IN_ITEMS:
        return f"an 'in' list of a claimable set holds 1 to {MAX_IN_ITEMS} values"
    for item in items:
        if json_type(item) not in _SCALAR_TYPES or isinstance(item, float):
            # Floats are left out: not every database reads a float literal back exactly.
            return "a claimable set compares with strings, integers, booleans or null only"
        if isinstance(item, str) and len(item) > MAX_LITERAL_CHARS:
            return f"a claimable set's strings are at most {MAX_LITERAL_CHARS} characters"
    return None


def _canonical_order(conditions: Sequence[Condition]) -> tuple[Condition, ...]:
    """One order per set of conditions, so the same set always gets the same name."""
    unique = {condition_key(c): c for c in conditions}
    return tuple(unique[key] for key in sorted(unique, key=repr))


#: The queue recipes' claim filter, ``status equals pending`` in FIFO order: every store
#: is created with its set (``store/postgres/schema.py``, ``store/sqlite/connection.py``),
#: as procrastinate ships its fixed ``WHERE status = 'todo'`` index, so a queue's claims
#: walk its pending rows however much history it keeps, with no DDL at run time.
DEFAULT_SET = parse_claim_set(
    [{"field": "status", "operator": "equals", "value": "pending"}], "all", "createdAt"
)
