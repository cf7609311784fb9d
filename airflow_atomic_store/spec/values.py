"""JSON value rules shared by the evaluator and the backends.

Both SQL backends and the reference evaluator must agree on what a value is,
so the rules live here once: which Python values are JSON, how numbers
compare (``1 == 1.0``, but a boolean is never a number), and what deep
equality means.
"""

from __future__ import annotations

import json
import math
from typing import Any

from airflow_atomic_store.exceptions import SpecError

#: Integers outside int64 cannot be stored exactly by SQLite's JSON functions.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
#: Deepest nesting of arrays and objects accepted in a value. Real documents
#: stay far below it; without a bound a deep (or cyclic) value would exhaust
#: Python's recursion limit instead of failing as a spec error.
MAX_DEPTH = 100


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def json_type(value: Any) -> str:
    """The JSON type name of a Python JSON value (as ``jsonb_typeof`` names it)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if is_number(value):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def json_equal(left: Any, right: Any) -> bool:
    """Deep JSON equality: numbers by value, booleans never equal numbers."""
    if is_number(left) and is_number(right):
        return bool(left == right)
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left is right
    if left is None or right is None:
        return left is None and right is None
    if isinstance(left, str) or isinstance(right, str):
        return isinstance(left, str) and isinstance(right, str) and left == right
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(json_equal, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(json_equal(left[k], right[k]) for k in left)
    return False


def check_json(value: Any, field: str, _depth: int = 0) -> Any:
    """Validate ``value`` as storable JSON and return it with tuples as lists.

    Rejected before any I/O: non-finite floats, integers outside int64, NUL
    characters (PostgreSQL cannot store them), nesting deeper than
    :data:`MAX_DEPTH` (and so cycles) and non-JSON types.
    """
    if _depth > MAX_DEPTH:
        raise SpecError(field, f"value is nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not INT_MIN <= value <= INT_MAX:
            raise SpecError(field, f"integer {value} is outside the 64-bit range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SpecError(field, f"{value!r} is not a finite number")
        return value
    if isinstance(value, str):
        check_text(value, field, "strings")
        return value
    if isinstance(value, (list, tuple)):
        return [check_json(item, f"{field}[{i}]", _depth + 1) for i, item in enumerate(value)]
    if isinstance(value, dict):
        checked = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise SpecError(field, f"object keys must be strings, got {key!r}")
            check_text(key, field, "object keys")
            checked[key] = check_json(item, f"{field}.{key}", _depth + 1)
        return checked
    raise SpecError(field, f"{type(value).__name__} is not a JSON value")


def check_text(text: str, field: str, what: str) -> None:
    if "\x00" in text:
        raise SpecError(field, f"{what} must not contain the NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SpecError(field, f"{what} must be valid Unicode (no lone surrogates)") from None


def check_object(value: Any, field: str) -> dict[str, Any]:
    """A stored row value must be a JSON object."""
    if not isinstance(value, dict):
        raise SpecError(field, f"must be a JSON object, got {type(value).__name__}")
    return check_json(value, field)


#: Built once: ``json.dumps`` with options builds a new encoder per call, which
#: was ten times the cost of encoding a short string (a claim encodes several).
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def dumps(value: Any) -> str:
    """Compact JSON text, non-ASCII kept as is so SQLite paths can name keys."""
    return _encode(value)


def plain_json(value: Any) -> bool:
    """Whether ``value`` is made of plain JSON types only, each valid (:func:`check_json`
    would accept it and copy it unchanged).

    A bulk call checks thousands of values and dumps them at once, within the call, so
    the copy (which protects a parsed spec kept for later) buys nothing there: such a
    value is used as it is; anything else (a tuple, a subclass, a bad number or text)
    goes through :func:`check_json`, which raises its precise error or copies it.
    """
    return _plain(value, 0)


def _plain_text(text: str) -> bool:
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _plain(value: Any, depth: int) -> bool:
    """Loops, not generators, and scalars checked in place: a bulk call checks each of
    thousands of small values (a generator per object was half of a 10,000-item call)."""
    kind = type(value)
    if kind is dict:
        if depth >= MAX_DEPTH:
            return False
        for key, item in value.items():
            if type(key) is not str or not _plain_text(key) or not _plain_item(item, depth):
                return False
        return True
    if kind is list:
        if depth >= MAX_DEPTH:
            return False
        for item in value:  # noqa: SIM110 (a loop: no generator per array)
            if not _plain_item(item, depth):
                return False
        return True
    return _plain_item(value, depth)


def _plain_item(item: Any, depth: int) -> bool:
    kind = type(item)
    if kind is str:
        return _plain_text(item)
    if kind is int:
        return INT_MIN <= item <= INT_MAX
    if item is None or kind is bool:
        return True
    if kind is float:
        return math.isfinite(item)
    if kind is dict or kind is list:
        return _plain(item, depth + 1)
    return False
