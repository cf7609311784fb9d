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

from airflow_atomic_store.store.postgres.queries import NamedQueries
from airflow_atomic_store.store.receipts import Receipt


def receipts_name(storage_table: str) -> str:
    return f"{storage_table}_receipts"


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


def recorded(cursor: psycopg.Cursor[Any], queries: NamedQueries, receipt: Receipt) -> Any:
    """The recorded raw result, or None when the receipt has expired (it is then removed).

    Raises ``IdempotencyKeyError`` when the key was recorded for another use.
    """
    row = cursor.execute(queries["read_receipt"], (receipt.key,)).fetchone()
    if row is None:
        return None  # purged between the conflict and this read
    primitive, table_name, target, result, expired = row
    if expired:
        cursor.execute(queries["forget_expired_receipt"], (receipt.key,))
        return None
    receipt.check_reuse(primitive, table_name, target)
    return result


def purge(cursor: psycopg.Cursor[Any], queries: NamedQueries, limit: int) -> int:
    return cursor.execute(queries["purge_receipts"], (limit,)).rowcount


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
    queries: NamedQueries,
    statement: bytes,
    args: tuple[Any, ...],
    receipt: Receipt | None,
    *,
    many_rows: bool,
    last: tuple[Any, ...] = (),
) -> Keyed:
    """Run a keyed statement; on a receipt conflict, read the recorded result instead.

    An expired receipt is removed and the statement runs again: after its
    retention a key is new. ``last``: parameters after the receipt's (the held
    id the receipt checks, a channel). Without a receipt: the statement, once.
    """
    if receipt is None:
        with cursor(many_rows=many_rows) as cur:
            return Keyed(cur.execute(statement, (*args, *last)).fetchall(), NOTHING)
    arguments = (*args, *parameters(receipt), *last)
    while True:
        with cursor(many_rows=many_rows) as cur:
            try:
                return Keyed(cur.execute(statement, arguments).fetchall(), NOTHING)
            except psycopg.Error as exc:
                if not is_conflict(exc, storage_table):
                    raise
            found = recorded(cur, queries, receipt)
            if found is not None:
                return Keyed([], found)
