"""A claim selection's query plan, custom or generic."""

from __future__ import annotations

from typing import Any

import psycopg

from airflow_atomic_store.store.postgres.where import (
    substitute_literals,
    substitute_positional,
    without_placeholders,
)

_EXPLAINED = "atomic_store_explain_claim"
_PREPARED = "SELECT 1 FROM pg_prepared_statements WHERE name = %s"


def explain(cur: psycopg.Cursor[Any], statement: bytes, params: list[Any], *, generic: bool) -> str:
    """``EXPLAIN`` of ``statement``; ``generic``: the plan made without the parameters' values.

    PostgreSQL settles on a generic plan for a statement it has run five times, so
    that plan shows whether an index is chosen from the statement text alone.
    """
    if not generic:
        rows = cur.execute(b"EXPLAIN " + statement, params).fetchall()
        return "\n".join(row[0] for row in rows)
    # EXPLAIN EXECUTE takes no bound parameters: its arguments are literals.
    arguments = f"({', '.join(['%s'] * len(params))})" if params else ""
    execute = substitute_literals(f"EXPLAIN EXECUTE {_EXPLAINED}{arguments}", params)
    try:
        with cur.connection.transaction():
            cur.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            prepared = substitute_positional(statement.decode())
            cur.execute(f"PREPARE {_EXPLAINED} AS {prepared}".encode())
            rows = cur.execute(without_placeholders(execute).encode()).fetchall()
    finally:
        if cur.execute(_PREPARED, (_EXPLAINED,)).fetchone() is not None:
            cur.execute(f"DEALLOCATE PREPARE {_EXPLAINED}")
    return "\n".join(row[0] for row in rows)
