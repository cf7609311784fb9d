"""Field paths: ``a.b.c`` walks nested objects, ``items[0]`` indexes arrays.

A path is parsed once into segments (``str`` = object key, ``int`` = array
index). Dialects turn the segments into SQL literals through the driver's own
quoting; nothing here ever builds SQL.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec.values import check_text

#: Largest array index accepted: PostgreSQL's ``jsonb -> int`` takes an int4.
MAX_INDEX: Final = 2**31 - 1
#: Deeper paths than this are almost certainly a templating accident.
MAX_SEGMENTS: Final = 32

_KEY = r"[^.\[\]\x00-\x1f\x7f-\x9f]+"
_TOKEN = re.compile(rf"\.({_KEY})|\[(0|[1-9][0-9]*)\]")
_FIRST = re.compile(_KEY)


class _Missing:
    """Marks a path that does not resolve (distinct from JSON null)."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final = _Missing()

Segment = str | int


@dataclass(frozen=True)
class FieldPath:
    """A validated path into a JSON object."""

    text: str
    segments: tuple[Segment, ...]

    def __str__(self) -> str:
        return self.text

    @property
    def top_level(self) -> str:
        first = self.segments[0]
        assert isinstance(first, str)
        return first


#: Paths parsed before, by text: DAGs use a handful of fields over and over. Bounded,
#: so generated field names cannot grow it; errors are not cached (they name the field).
_parsed: dict[str, FieldPath] = {}
_PARSED_LIMIT = 4096


def parse_path(text: object, *, field: str) -> FieldPath:
    """Parse ``text`` or raise :class:`SpecError` naming ``field``."""
    if isinstance(text, str):
        known = _parsed.get(text)
        if known is not None:
            return known
    path = _parse_path(text, field)
    if len(_parsed) < _PARSED_LIMIT:
        _parsed[path.text] = path
    return path


def _parse_path(text: object, field: str) -> FieldPath:
    if not isinstance(text, str):
        raise SpecError(field, f"a field path must be a string, got {type(text).__name__}")
    if not text:
        raise SpecError(field, "a field path must not be empty")
    check_text(text, field, "field paths")
    first = _FIRST.match(text)
    if first is None:
        raise SpecError(field, f"invalid field path {text!r}: it must start with a field name")
    segments: list[Segment] = [first.group(0)]
    position = first.end()
    while position < len(text):
        token = _TOKEN.match(text, position)
        if token is None:
            raise SpecError(field, _explain(text, position))
        key, index = token.groups()
        if key is not None:
            segments.append(key)
        else:
            number = int(index)
            if number > MAX_INDEX:
                raise SpecError(field, f"array index {number} in {text!r} is too large")
            segments.append(number)
        position = token.end()
    if len(segments) > MAX_SEGMENTS:
        raise SpecError(field, f"field path {text!r} is deeper than {MAX_SEGMENTS} segments")
    return FieldPath(text, tuple(segments))


def _explain(text: str, position: int) -> str:
    char = text[position]
    if char == ".":
        return f"invalid field path {text!r}: empty or invalid segment after '.' at {position}"
    if char == "[":
        return f"invalid field path {text!r}: an array index must be a non-negative integer"
    if ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F:
        return f"invalid field path {text!r}: control character at position {position}"
    return f"invalid field path {text!r}: unexpected {char!r} at position {position}"


def resolve(value: Any, path: FieldPath) -> Any:
    """The value at ``path``, or :data:`MISSING` when any step does not exist."""
    current = value
    for segment in path.segments:
        if isinstance(segment, str):
            if not isinstance(current, dict) or segment not in current:
                return MISSING
            current = current[segment]
        else:
            if not isinstance(current, list) or segment >= len(current):
                return MISSING
            current = current[segment]
    return current


# -- the items that hold paths ---------------------------------------------------------
#
# ``where`` and ``mutations`` share a shape: a list of ``{field, …}`` objects. Both accept
# None (nothing) and a single object (a one-item list, what a hand-written spec for one
# guard or one mark usually looks like), and check each item the same way before their
# own keys are read.


def spec_items(value: Any, field: str, noun: str) -> list[Any]:
    """``value`` as a list of items; ``noun`` is the plural that names them in errors."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [value]
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise SpecError(field, f"must be a list of {noun}, got {type(value).__name__}")
    return list(value)


def item_path(item: Any, field: str, noun: str, keys: frozenset[str], usage: str) -> FieldPath:
    """Check that ``item`` is an object with only ``keys``, and parse its ``field`` path."""
    if not isinstance(item, Mapping):
        raise SpecError(field, f"a {noun} must be an object, got {type(item).__name__}")
    unknown = set(item) - keys
    if unknown:
        raise SpecError(field, f"unknown keys {sorted(map(str, unknown))}; use {usage}")
    if "field" not in item:
        raise SpecError(field, f"a {noun} needs a 'field'")
    return parse_path(item["field"], field=f"{field}.field")
