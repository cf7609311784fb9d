"""The many-rows verbs' arguments: a list of upsert items, or a list of keys.

``atomic_upsert_many`` takes items ``{"key", "insert_value"[, "mutations"]}`` (or
the tuple ``(key, insert_value[, mutations])``); ``atomic_update_many`` takes keys.
Every item is checked here, before any I/O, and an error names the item
(``items[3].insert_value``): one bad item fails the whole call and nothing is
written. A key given twice is an error too: one statement cannot write a row
twice, and which of the two was meant is unknowable.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec.mutations import Mutation, parse_mutations
from airflow_atomic_store.spec.options import MAX_KEY_BYTES, parse_key
from airflow_atomic_store.spec.values import check_object, plain_json

#: Items (or keys) one call takes: one statement each on PostgreSQL, one transaction on
#: SQLite. A producer with more calls again; 10,000 is also ``query``'s largest page.
BULK_LIMIT: Final = 10_000
_ITEM_KEYS: Final = frozenset({"key", "insert_value", "mutations"})


@dataclass(frozen=True)
class UpsertItem:
    """One row of a bulk upsert: insert ``insert_value`` if absent, else apply ``mutations``."""

    key: str
    insert_value: dict[str, Any]
    mutations: tuple[Mutation, ...] = ()


def parse_upsert_items(items: Any, field: str = "items") -> tuple[UpsertItem, ...]:
    """The items, each checked; the first bad one raises, naming itself."""
    listed = _listed(items, field, "items (objects with key and insert_value)")
    parsed = tuple([_parse_item(item, field, i) for i, item in enumerate(listed)])
    _refuse_duplicates([item.key for item in parsed], field, ".key")
    return parsed


def parse_keys(keys: Any, field: str = "keys") -> tuple[str, ...]:
    """Distinct row keys, at most :data:`BULK_LIMIT`."""
    listed = _listed(keys, field, "keys")
    parsed = tuple([_key(key, field, i) for i, key in enumerate(listed)])
    _refuse_duplicates(parsed, field, "")
    return parsed


def keys_target(keys: Sequence[str]) -> str:
    """What an idempotency receipt of a bulk call names as its target: the set of keys.

    A key reused for a call over other keys is an error, as a one-row call's key reused
    for another row is; the same keys in another order are the same call.
    """
    digest = hashlib.sha256("\x00".join(sorted(keys)).encode()).hexdigest()[:32]
    return f"{len(keys)} keys sha256:{digest}"


def _listed(value: Any, field: str, noun: str) -> Sequence[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise SpecError(field, f"must be a list of {noun}, got {type(value).__name__}")
    if len(value) > BULK_LIMIT:
        raise SpecError(
            field,
            f"at most {BULK_LIMIT:,} per call, got {len(value):,}: split them into several "
            "calls (each is one statement)",
        )
    return value


def _parse_item(item: Any, items_field: str, index: int) -> UpsertItem:
    """One item; its field names (``items[3].key``) are only written for an error."""
    if type(item) is dict or isinstance(item, Mapping):
        if not item.keys() <= _ITEM_KEYS:
            unknown = sorted(map(str, set(item) - _ITEM_KEYS))
            raise SpecError(
                f"{items_field}[{index}]",
                f"unknown keys {unknown}; use key, insert_value, mutations",
            )
        if "key" not in item or "insert_value" not in item:
            raise SpecError(
                f"{items_field}[{index}]", "an item needs a 'key' and an 'insert_value'"
            )
        key, value, mutations = item["key"], item["insert_value"], item.get("mutations")
    elif isinstance(item, (list, tuple)) and len(item) in (2, 3):
        key, value, mutations = item[0], item[1], item[2] if len(item) == 3 else None
    else:
        raise SpecError(
            f"{items_field}[{index}]",
            "an item is an object {key, insert_value[, mutations]} or a list "
            f"[key, insert_value[, mutations]], got {type(item).__name__}",
        )
    if type(value) is not dict or not plain_json(value):
        value = check_object(value, f"{items_field}[{index}].insert_value")
    return UpsertItem(
        _key(key, items_field, index),
        value,
        ()
        if mutations is None
        else parse_mutations(mutations, field=f"{items_field}[{index}].mutations"),
    )


def _key(key: Any, items_field: str, index: int) -> str:
    # Most keys are short ASCII text, which parse_key would accept: checked here in one
    # step (parse_key's general checks cost a 10,000-item call 20 ms).
    if type(key) is str and key.isascii() and 0 < len(key) <= MAX_KEY_BYTES and "\x00" not in key:
        return key
    try:
        return parse_key(key)
    except SpecError as exc:  # parse_key names "key": name the item instead
        suffix = ".key" if items_field == "items" else ""
        raise SpecError(f"{items_field}[{index}]{suffix}", exc.problem) from None


def _refuse_duplicates(keys: Sequence[str], field: str, suffix: str) -> None:
    if len(set(keys)) == len(keys):
        return
    first: dict[str, int] = {}
    for i, key in enumerate(keys):
        if key in first:
            raise SpecError(
                f"{field}[{i}]{suffix}",
                f"key {key!r} is given twice (also {field}[{first[key]}]): one call writes a "
                "row once",
            )
        first[key] = i
