"""The ``where`` predicates (``equals``, ``gt``, …): one registry entry each, with its meaning.

Every ``not_*`` operator is defined as the exact negation of its positive
form, so a missing field satisfies ``not_equals``, ``not_in``,
``not_contains`` and ``not_exists``. Backends provide SQL for the positive
forms only and derive the negations the same way, which keeps the two sides
from drifting apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_atomic_store.spec.paths import MISSING
from airflow_atomic_store.spec.values import is_number, json_equal

Test = Callable[[Any, Any], bool]
"""``test(actual, expected)``; ``actual`` may be :data:`MISSING`."""


def _equals(actual: Any, expected: Any) -> bool:
    return actual is not MISSING and json_equal(actual, expected)


def _ordered(compare: Callable[[Any, Any], bool]) -> Test:
    """Numbers compare as numbers, strings as strings; anything else is false."""

    def test(actual: Any, expected: Any) -> bool:
        if is_number(actual) and is_number(expected):
            return compare(actual, expected)
        if isinstance(actual, str) and isinstance(expected, str):
            return compare(actual, expected)
        return False

    return test


def _in(actual: Any, expected: Any) -> bool:
    return actual is not MISSING and any(json_equal(actual, item) for item in expected)


def _contains(actual: Any, expected: Any) -> bool:
    if isinstance(actual, str):
        return isinstance(expected, str) and expected in actual
    if isinstance(actual, list):
        return any(json_equal(item, expected) for item in actual)
    return False


def _starts_with(actual: Any, expected: Any) -> bool:
    return isinstance(actual, str) and actual.startswith(expected)


def _ends_with(actual: Any, expected: Any) -> bool:
    return isinstance(actual, str) and actual.endswith(expected)


def _exists(actual: Any, expected: Any) -> bool:
    return actual is not MISSING


# What the spec value must be, per operator: a problem message or None.
def _any_value(value: Any) -> str | None:
    return None


def _orderable(value: Any) -> str | None:
    if is_number(value) or isinstance(value, str):
        return None
    return "needs a number or a string value"


def _a_list(value: Any) -> str | None:
    return None if isinstance(value, list) else "needs a list value"


def _a_string(value: Any) -> str | None:
    return None if isinstance(value, str) else "needs a string value"


@dataclass(frozen=True)
class Operator:
    """A positive operator, or the negation of one (``negates`` names it)."""

    name: str
    test: Test
    check_value: Callable[[Any], str | None]
    negates: str | None = None
    takes_value: bool = True

    @property
    def positive(self) -> str:
        return self.negates or self.name

    def holds(self, actual: Any, expected: Any) -> bool:
        return self.test(actual, expected)


def _negation(name: str, positive: Operator) -> Operator:
    return Operator(
        name=name,
        test=lambda actual, expected: not positive.test(actual, expected),
        check_value=positive.check_value,
        negates=positive.name,
        takes_value=positive.takes_value,
    )


_POSITIVE = [
    Operator("equals", _equals, _any_value),
    Operator("gt", _ordered(lambda a, b: a > b), _orderable),
    Operator("gte", _ordered(lambda a, b: a >= b), _orderable),
    Operator("lt", _ordered(lambda a, b: a < b), _orderable),
    Operator("lte", _ordered(lambda a, b: a <= b), _orderable),
    Operator("in", _in, _a_list),
    Operator("contains", _contains, _any_value),
    Operator("starts_with", _starts_with, _a_string),
    Operator("ends_with", _ends_with, _a_string),
    Operator("exists", _exists, _any_value, takes_value=False),
]
_BY_NAME = {op.name: op for op in _POSITIVE}
_NEGATIONS = {
    "not_equals": "equals",
    "not_in": "in",
    "not_contains": "contains",
    "not_exists": "exists",
}

OPERATORS: dict[str, Operator] = {
    **_BY_NAME,
    **{name: _negation(name, _BY_NAME[positive]) for name, positive in _NEGATIONS.items()},
}

#: Spellings accepted besides the canonical names (short forms and camelCase).
ALIASES: dict[str, str] = {
    "eq": "equals",
    "ne": "not_equals",
    "neq": "not_equals",
    "notEquals": "not_equals",
    "ge": "gte",
    "le": "lte",
    "notIn": "not_in",
    "nin": "not_in",
    "notContains": "not_contains",
    "startsWith": "starts_with",
    "endsWith": "ends_with",
    "notExists": "not_exists",
}


def lookup(name: Any) -> Operator | None:
    if not isinstance(name, str):
        return None
    return OPERATORS.get(ALIASES.get(name, name))
