"""``set`` mutations: parsing and the reference ``apply``.

Mutations apply left to right. ``set`` writes any JSON value and creates
missing parent objects; ``increment`` adds a signed number to a number, a
missing field or null (which start from 0). Anything else is a
:class:`MutationError` and nothing is written.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_atomic_store.exceptions import MutationError, SpecError
from airflow_atomic_store.spec.memo import Memo
from airflow_atomic_store.spec.paths import MISSING, FieldPath, item_path, resolve, spec_items
from airflow_atomic_store.spec.values import INT_MAX, INT_MIN, check_json, is_number, json_type

_MUTATION_KEYS = frozenset({"field", "operation", "op", "value"})


@dataclass(frozen=True)
class Mutation:
    path: FieldPath
    operation: str
    value: Any

    def to_json(self) -> dict[str, Any]:
        """The form the PostgreSQL apply function receives."""
        return {
            "field": self.path.text,
            "path": list(self.path.segments),
            "op": self.operation,
            "value": self.value,
        }


def _check_set_value(value: Any, field: str) -> Any:
    return check_json(value, field)


def _check_increment_value(value: Any, field: str) -> Any:
    if not is_number(value):
        raise SpecError(field, f"increment needs a number, got {value!r}")
    return check_json(value, field)


def _apply_set(document: dict[str, Any], mutation: Mutation) -> None:
    _write(document, mutation.path, copy.deepcopy(mutation.value))


def _apply_increment(document: dict[str, Any], mutation: Mutation) -> None:
    current = resolve(document, mutation.path)
    if current is MISSING or current is None:
        current = 0
    if not is_number(current):
        raise MutationError(
            mutation.path.text,
            f"cannot increment a {_json_type(current)}; increment needs a number",
        )
    result = current + mutation.value
    if isinstance(result, int) and not INT_MIN <= result <= INT_MAX:
        raise MutationError(mutation.path.text, "increment result is outside the 64-bit range")
    if isinstance(result, float) and result in (float("inf"), float("-inf")):
        raise MutationError(mutation.path.text, "increment result is not a finite number")
    _write(document, mutation.path, result)


@dataclass(frozen=True)
class Operation:
    name: str
    check_value: Callable[[Any, str], Any]
    apply: Callable[[dict[str, Any], Mutation], None]


OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation("set", _check_set_value, _apply_set),
        Operation("increment", _check_increment_value, _apply_increment),
    )
}


def parse_mutations(mutations: Any, *, field: str = "mutations") -> tuple[Mutation, ...]:
    """Parse a list of ``{field, operation, value}`` mutations (once per spec: ``spec/memo.py``)."""
    result: tuple[Mutation, ...] = _REMEMBERED(mutations, field)
    return result


def _parse_mutations(mutations: Any, *, field: str) -> tuple[Mutation, ...]:
    items = spec_items(mutations, field, "mutations")
    return tuple(_parse_mutation(item, f"{field}[{i}]") for i, item in enumerate(items))


_REMEMBERED = Memo(_parse_mutations)


def _parse_mutation(item: Any, field: str) -> Mutation:
    path = item_path(item, field, "mutation", _MUTATION_KEYS, "field, operation, value")
    name = item.get("operation", item.get("op"))
    operation = OPERATIONS.get(name) if isinstance(name, str) else None
    if operation is None:
        raise SpecError(
            f"{field}.operation", f"unknown operation {name!r}; valid: {', '.join(OPERATIONS)}"
        )
    if "value" not in item:
        raise SpecError(f"{field}.value", f"operation {name!r} needs a 'value'")
    return Mutation(path, operation.name, operation.check_value(item["value"], f"{field}.value"))


def apply(mutations: Iterable[Mutation], value: Mapping[str, Any]) -> dict[str, Any]:
    """The reference result of applying ``mutations`` to ``value`` (not modified)."""
    document = copy.deepcopy(dict(value))
    for mutation in mutations:
        OPERATIONS[mutation.operation].apply(document, mutation)
    return document


def _write(document: dict[str, Any], path: FieldPath, new_value: Any) -> None:
    """Write ``new_value`` at ``path``, creating missing parent objects."""
    parent: Any = document
    segments = path.segments
    for depth, segment in enumerate(segments):
        last = depth == len(segments) - 1
        where = _prefix(path, depth)
        if isinstance(segment, str):
            if not isinstance(parent, dict):
                raise MutationError(
                    path.text,
                    f"cannot set through {where}: it is a {_json_type(parent)}, not an object",
                )
            if last:
                parent[segment] = new_value
            else:
                parent = parent.setdefault(segment, {})
        else:
            if not isinstance(parent, list):
                raise MutationError(
                    path.text, f"cannot index {where}: it is a {_json_type(parent)}, not an array"
                )
            if segment >= len(parent):
                raise MutationError(
                    path.text, f"index {segment} is out of range for {where} (length {len(parent)})"
                )
            if last:
                parent[segment] = new_value
            else:
                parent = parent[segment]


def _prefix(path: FieldPath, depth: int) -> str:
    """The path text up to (not including) segment ``depth``, for messages."""
    if depth == 0:
        return "the row value"
    text = ""
    for segment in path.segments[:depth]:
        text += f"[{segment}]" if isinstance(segment, int) else (f".{segment}" if text else segment)
    return repr(text)


def _json_type(value: Any) -> str:
    return "missing value" if value is MISSING else json_type(value)
