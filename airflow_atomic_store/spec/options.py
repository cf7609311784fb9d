"""Order-by, direction, limit and return-field options."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.spec.values import INT_MAX, INT_MIN, check_text

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
