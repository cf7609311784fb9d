"""``where`` conditions and ``match``: parsing and the reference evaluator."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec.memo import Memo
from airflow_atomic_store.spec.paths import FieldPath, item_path, resolve, spec_items
from airflow_atomic_store.spec.predicates import OPERATORS, Operator, lookup
from airflow_atomic_store.spec.values import check_json

Match = Literal["all", "any"]
MATCH_MODES: tuple[Match, ...] = ("all", "any")

_CONDITION_KEYS = frozenset({"field", "operator", "op", "value"})

#: Most conditions in one ``where``. SQLite refuses expressions nested more
#: than 1000 deep, which a flat AND/OR of about 990 conditions reaches; the
#: bound keeps every accepted spec runnable on both backends.
MAX_CONDITIONS = 100


@dataclass(frozen=True)
class Condition:
    path: FieldPath
    operator: Operator
    value: Any = None

    def holds(self, value: Mapping[str, Any]) -> bool:
        return self.operator.holds(resolve(value, self.path), self.value)


def parse_match(match: Any, *, field: str = "match") -> Match:
    if isinstance(match, str) and match.lower() in MATCH_MODES:
        return match.lower()  # type: ignore[return-value]
    raise SpecError(field, f"must be one of 'all' or 'any', got {match!r}")


def parse_where(where: Any, *, field: str = "where") -> tuple[Condition, ...]:
    """Parse a list of ``{field, operator, value}`` conditions.

    ``None`` or an empty list means "every row". A single mapping is accepted
    as a one-condition list because that is what a hand-written spec for one
    guard usually looks like. An equal spec parsed before is not parsed again
    (``spec/memo.py``).
    """
    result: tuple[Condition, ...] = _REMEMBERED(where, field)
    return result


def _parse_where(where: Any, *, field: str) -> tuple[Condition, ...]:
    items = spec_items(where, field, "conditions")
    conditions = tuple(_parse_condition(item, f"{field}[{i}]") for i, item in enumerate(items))
    if len(conditions) > MAX_CONDITIONS:
        raise SpecError(
            field, f"at most {MAX_CONDITIONS} conditions are supported, got {len(conditions)}"
        )
    return conditions


_REMEMBERED = Memo(_parse_where)


def _parse_condition(item: Any, field: str) -> Condition:
    path = item_path(item, field, "condition", _CONDITION_KEYS, "field, operator, value")
    name = item.get("operator", item.get("op"))
    if name is None:
        raise SpecError(f"{field}.operator", "a condition needs an 'operator'")
    operator = lookup(name)
    if operator is None:
        raise SpecError(
            f"{field}.operator", f"unknown operator {name!r}; valid: {', '.join(OPERATORS)}"
        )
    if not operator.takes_value:
        return Condition(path, operator, None)
    if "value" not in item:
        raise SpecError(f"{field}.value", f"operator {operator.name!r} needs a 'value'")
    value = check_json(item["value"], f"{field}.value")
    problem = operator.check_value(value)
    if problem:
        raise SpecError(f"{field}.value", f"operator {operator.name!r} {problem}, got {value!r}")
    return Condition(path, operator, value)


def evaluate(where: Iterable[Condition], match: str, value: Mapping[str, Any]) -> bool:
    """The reference meaning of a guard: does ``value`` satisfy ``where``?

    An empty ``where`` matches every row whatever ``match`` says.
    """
    conditions = tuple(where)
    if not conditions:
        return True
    results = (condition.holds(value) for condition in conditions)
    return all(results) if parse_match(match) == "all" else any(results)
