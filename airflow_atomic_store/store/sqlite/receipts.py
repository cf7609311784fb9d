"""SQLite receipts: read and written inside the primitive's own write transaction."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from airflow_atomic_store import timestamps
from airflow_atomic_store.spec.values import dumps
from airflow_atomic_store.store.receipts import Receipt

#: A store's statement by kind (``StatementCompiler.statement``).
Statement = Callable[[str], str]
#: What :func:`recorded` returns when no receipt holds a result.
NOTHING: Any = object()


def recorded(connection: sqlite3.Connection, statement: Statement, receipt: Receipt | None) -> Any:
    """The result recorded under the receipt's key, inside the write transaction.

    The transaction holds SQLite's write lock, so a concurrent call with the
    same key waits and then finds this call's receipt. An expired receipt is
    removed: after its retention a key is new.
    """
    if receipt is None:
        return NOTHING
    row = connection.execute(statement("read_receipt"), (timestamps.now(), receipt.key)).fetchone()
    if row is None:
        return NOTHING
    primitive, table, target, result, expired = row
    if expired:
        connection.execute(statement("forget_receipt"), (receipt.key,))
        return NOTHING
    receipt.check_reuse(primitive, table, target)
    return json.loads(result)


def record(
    connection: sqlite3.Connection, statement: Statement, receipt: Receipt | None, result: Any
) -> None:
    """Write the receipt of a keyed call beside its effect, in the same transaction."""
    if receipt is None:
        return
    text = dumps(result)
    if len(text) * 4 > receipt.max_result_bytes:  # UTF-8 takes at most 4 bytes a character
        receipt.check_result_size(len(text.encode()))  # raises: the transaction rolls back
    connection.execute(
        statement("record_receipt"),
        (
            receipt.key,
            receipt.primitive,
            receipt.table,
            receipt.target,
            text,
            timestamps.now(),
            timestamps.shifted(timedelta(seconds=receipt.retention)),
        ),
    )
