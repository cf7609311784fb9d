"""PostgreSQL receipts: written by the primitive's own statement, read after a conflict.

The keyed statement inserts the receipt in a data-modifying CTE beside the
effect. A receipt already under the key makes that insert fail with a unique
violation, which aborts the whole statement: the effect is undone with it. A
concurrent call with the same key waits on the key's index entry until the
first commits, then fails the same way; either way the caller then reads the
recorded result.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from airflow_atomic_store.store.receipts import Receipt

_READ = (
    "SELECT primitive, table_name, target, result, expires_at < clock_timestamp() "
    "FROM {receipts} WHERE idempotency_key = %s"
)
_FORGET_EXPIRED = (
    "DELETE FROM {receipts} WHERE idempotency_key = %s AND expires_at < clock_timestamp()"
)
_PURGE = (
    "DELETE FROM {receipts} WHERE idempotency_key IN (SELECT idempotency_key FROM {receipts} "
    "WHERE expires_at < clock_timestamp() ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED)"
)


def receipts_table(storage_table: str) -> str:
    return sql.Identifier(f"{storage_table}_receipts").as_string(None)


def conflict_constraint(storage_table: str) -> str:
    """The primary key whose violation means "this key has a receipt"."""
    return f"{storage_table}_receipts_pkey"


def parameters(receipt: Receipt) -> tuple[Any, ...]:
    """The receipt CTE's parameters, in the order ``_RECEIPT`` takes them."""
    return (
        *(receipt.key, receipt.primitive, receipt.table, receipt.target),
        *(receipt.max_result_bytes, receipt.retention),
    )


def is_conflict(exc: psycopg.Error, storage_table: str) -> bool:
    return isinstance(
        exc, psycopg.errors.UniqueViolation
    ) and exc.diag.constraint_name == conflict_constraint(storage_table)


def recorded(cursor: psycopg.Cursor[Any], storage_table: str, receipt: Receipt) -> Any:
    """The recorded raw result, or None when the receipt has expired (it is then removed).

    Raises ``IdempotencyKeyError`` when the key was recorded for another use.
    """
    table = receipts_table(storage_table)
    row = cursor.execute(_READ.format(receipts=table).encode(), (receipt.key,)).fetchone()
    if row is None:
        return None  # purged between the conflict and this read
    primitive, table_name, target, result, expired = row
    if expired:
        cursor.execute(_FORGET_EXPIRED.format(receipts=table).encode(), (receipt.key,))
        return None
    receipt.check_reuse(primitive, table_name, target)
    return result


def purge(cursor: psycopg.Cursor[Any], storage_table: str, limit: int) -> int:
    table = receipts_table(storage_table)
    return cursor.execute(_PURGE.format(receipts=table).encode(), (limit,)).rowcount


#: ``Keyed.recorded`` when the statement ran (nothing was recorded before).
NOTHING: Any = object()


@dataclass(frozen=True)
class Keyed:
    """A keyed statement's rows, or (``recorded`` set) the result a receipt holds."""

    rows: list[Any]
    recorded: Any


def run_keyed(
    cursor: Callable[..., AbstractContextManager[psycopg.Cursor[Any]]],
    storage_table: str,
    statement: bytes,
    args: tuple[Any, ...],
    receipt: Receipt,
    *,
    many_rows: bool,
    last: tuple[Any, ...] = (),
) -> Keyed:
    """Run a keyed statement; on a receipt conflict, read the recorded result instead.

    An expired receipt is removed and the statement runs again: after its
    retention a key is new. ``last``: parameters after the receipt's (a channel).
    """
    arguments = (*args, *parameters(receipt), *last)
    while True:
        with cursor(many_rows=many_rows) as cur:
            try:
                return Keyed(cur.execute(statement, arguments).fetchall(), NOTHING)
            except psycopg.Error as exc:
                if not is_conflict(exc, storage_table):
                    raise
            found = recorded(cur, storage_table, receipt)
            if found is not None:
                return Keyed([], found)
