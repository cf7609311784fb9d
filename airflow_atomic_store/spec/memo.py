"""Parse a spec once: results of pure parsers remembered by a frozen form of the raw spec.

A dispatcher claims with the same ``where`` and marks rows done with the same
``mutations`` thousands of times, and parsing them showed in a claim's profile
(docs/benchmarks.md). Parsing is pure, so
its result can be reused for an equal spec, provided "equal" is strict enough
that the parser could not have answered differently:

- only exact ``dict``/``list``/``tuple``/``str``/``int``/``float``/``bool``/None
  are frozen (a subclass, a generator or any other type is parsed every time);
- every scalar carries its type, so ``1``, ``1.0`` and ``True`` (equal in
  Python) and ``0.0``/``-0.0`` (equal as floats) are different keys;
- a failed parse is not remembered: the error is raised again, each time.

Parsed specs are frozen dataclasses whose values the parsers copied
(``check_json``), so the caller changing its own lists afterwards cannot reach
a remembered result. Nothing here outlives the process or depends on the
database, so no remembered result can go stale.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

#: Remembered results per parser; beyond this the oldest half is forgotten.
MAX_ENTRIES = 512
#: Deeper specs are parsed every time (the parser rejects them anyway past MAX_DEPTH).
_MAX_DEPTH = 20

T = TypeVar("T")


class _Unfreezable(Exception):
    """The raw spec holds something this module does not freeze."""


def _freeze(value: Any, depth: int = 0) -> Hashable:
    """``value`` frozen; strings and None (most of a spec) are kept inline, without a call."""
    kind = type(value)
    if kind is str or value is None:
        return value
    if kind is dict:
        if depth >= _MAX_DEPTH:
            raise _Unfreezable
        depth += 1
        items: list[Hashable] = ["d"]
        for key, item in value.items():
            if type(key) is not str:
                raise _Unfreezable
            plain = type(item) is str or item is None
            items.append((key, item if plain else _freeze(item, depth)))
        return tuple(items)
    if kind is list or kind is tuple:
        if depth >= _MAX_DEPTH:
            raise _Unfreezable
        depth += 1
        return (
            "l",
            *[
                item if type(item) is str or item is None else _freeze(item, depth)
                for item in value
            ],
        )
    if kind is bool:
        return ("b", value)
    if kind is int:
        return ("i", value)
    if kind is float:
        return ("f", repr(value))
    raise _Unfreezable


def frozen(value: Any) -> Hashable | None:
    """A hashable, type-exact form of ``value``; None when it cannot be frozen."""
    try:
        return ("spec", _freeze(value))
    except _Unfreezable:
        return None


class Memo:
    """Results of one pure parser by (frozen raw spec, field name)."""

    def __init__(self, parse: Callable[..., T]) -> None:
        self._parse = parse
        self._results: dict[Hashable, Any] = {}

    def __call__(self, raw: Any, field: str) -> Any:
        key = frozen(raw)
        if key is None:
            return self._parse(raw, field=field)
        key = (key, field)
        try:
            return self._results[key]
        except KeyError:
            pass
        result = self._parse(raw, field=field)
        if len(self._results) >= MAX_ENTRIES:
            for old in list(self._results)[: MAX_ENTRIES // 2]:
                self._results.pop(old, None)
        self._results[key] = result
        return result

    def clear(self) -> None:
        self._results.clear()
