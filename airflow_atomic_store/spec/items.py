"""The shape ``where`` and ``mutations`` share: a list of ``{field, …}`` objects.

Both accept ``None`` (nothing) and a single object (a one-item list, what a
hand-written spec for one guard or one mark usually looks like), and check each
item the same way before their own keys are read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec.paths import FieldPath, parse_path


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
