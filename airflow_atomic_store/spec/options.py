"""Order-by, direction, limit and return-field options."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec.mutations import Mutation, parse_mutations
from airflow_atomic_store.spec.values import INT_MAX, INT_MIN, check_object, check_text, plain_json

OrderColumn = Literal["created_at", "record_timestamp"]
Direction = Literal["asc", "desc"]

#: Spec names of the orderable columns and the physical column behind each.
ORDER_COLUMNS: Final[dict[str, OrderColumn]] = {
    "createdAt": "created_at",
    "recordTimestamp": "record_timestamp",
}
_ORDER_ALIASES: Final = {"created_at": "createdAt", "record_timestamp": "recordTimestamp"}

ClaimMode = Literal["mark", "delete"]
#: ``mark``: the claim's mutations mark rows in place (at-least-once, with stale-claim
#: recovery); ``delete``: rows are removed by the claiming statement (at-most-once).
CLAIM_MODES: Final[tuple[ClaimMode, ...]] = ("mark", "delete")

CLAIM_LIMIT: Final = (1, 1000)
QUERY_LIMIT: Final = (1, 10_000)

#: Longest key and table name, in UTF-8 bytes. Both are part of the primary
#: key, and PostgreSQL cannot index a row whose index entry exceeds ~2.7 kB;
#: the limits keep every key storable on both backends (1024 bytes is also
#: the longest S3 object key).
MAX_KEY_BYTES: Final = 1024
MAX_TABLE_BYTES: Final = 512


@dataclass(frozen=True)
class Ordering:
    column: OrderColumn
    direction: Direction


def parse_ordering(order_by: Any, direction: Any) -> Ordering:
    name = _ORDER_ALIASES.get(order_by, order_by) if isinstance(order_by, str) else None
    if name not in ORDER_COLUMNS:
        raise SpecError(
            "order_by",
            f"must be one of {', '.join(ORDER_COLUMNS)}, got {order_by!r} "
            "(ordering by a stored value field is not supported)",
        )
    if not isinstance(direction, str) or direction.lower() not in ("asc", "desc"):
        raise SpecError("direction", f"must be 'asc' or 'desc', got {direction!r}")
    return Ordering(ORDER_COLUMNS[name], direction.lower())  # type: ignore[arg-type]


def parse_claim_mode(mode: Any) -> ClaimMode:
    if mode not in CLAIM_MODES or not isinstance(mode, str):
        raise SpecError("mode", f"must be one of {', '.join(CLAIM_MODES)}, got {mode!r}")
    return mode  # type: ignore[return-value]


def parse_limit(limit: Any, bounds: tuple[int, int] = CLAIM_LIMIT, *, field: str = "limit") -> int:
    low, high = bounds
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise SpecError(field, f"must be an integer from {low} to {high}, got {limit!r}")
    if not low <= limit <= high:
        raise SpecError(field, f"must be from {low} to {high}, got {limit}")
    return limit


def parse_return_fields(fields: Any) -> tuple[str, ...] | None:
    """``None`` keeps the whole value; a list keeps only those top-level fields."""
    if fields is None:
        return None
    if isinstance(fields, str):
        fields = [fields]
    if not isinstance(fields, Iterable):
        raise SpecError("return_fields", f"must be a list of field names, got {fields!r}")
    names = tuple(fields)
    for name in names:
        if not isinstance(name, str) or not name or "\x00" in name:
            raise SpecError(
                "return_fields", f"each entry must be a non-empty field name, got {name!r}"
            )
    return names


def project(value: dict[str, Any] | None, fields: tuple[str, ...] | None) -> dict[str, Any] | None:
    """Keep only ``fields`` of ``value`` (all of it when ``fields`` is None)."""
    if value is None or fields is None:
        return value
    return {name: value[name] for name in fields if name in value}


def parse_table(table: Any, field: str = "table") -> str:
    """A logical table's name: text only (``field`` names the argument in errors).

    Unlike a key, an integer is refused: a table is named in the DAG, and
    ``archive_table=5`` archiving into a table ``"5"`` is a slip, not an id.
    """
    if not isinstance(table, str):
        raise SpecError(field, f"must be a string, got {type(table).__name__}")
    if not table:
        raise SpecError(field, "must not be empty")
    check_text(table, field, "table names")
    _check_size(table, MAX_TABLE_BYTES, field, "a table name")
    return table


def parse_key(key: Any) -> str:
    key = _name_text(key, "key", "key")
    check_text(key, "key", "keys")
    _check_size(key, MAX_KEY_BYTES, "key", "a key")
    return key


def _name_text(name: Any, field: str, what: str) -> str:
    """A key as text; an integer (a shard, an event id) is its decimal text.

    Keys are text in storage, and an id often arrives as a number (a mapped value,
    ``dag_run.conf``): ``7`` and ``"7"`` name the same row. A bool is not a name.
    """
    if isinstance(name, bool) or not isinstance(name, (str, int)):
        raise SpecError(field, f"must be a string, got {type(name).__name__}")
    if isinstance(name, int) and not INT_MIN <= name <= INT_MAX:
        raise SpecError(
            field, f"an integer {what} must fit in 64 bits, got {name.bit_length()} bits"
        )
    text = str(name)
    if not text:
        raise SpecError(field, "must not be empty")
    return text


def _check_size(text: str, limit: int, field: str, what: str) -> None:
    size = len(text.encode("utf-8"))
    if size > limit:
        raise SpecError(field, f"{what} may be at most {limit} bytes in UTF-8, got {size}")


# -- the many-rows verbs' arguments ------------------------------------------------------
#
# The many-rows verbs' arguments: a list of upsert items, or a list of keys.
#
# ``atomic_upsert_many`` takes items ``{"key", "insert_value"[, "mutations"]}`` (or
# the tuple ``(key, insert_value[, mutations])``); ``atomic_update_many`` takes keys.
# Every item is checked here, before any I/O, and an error names the item
# (``items[3].insert_value``): one bad item fails the whole call and nothing is
# written. A key given twice is an error too: one statement cannot write a row
# twice, and which of the two was meant is unknowable.

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
