"""A claim selection's query plan, custom or generic."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.adapt import Dumper

_NAME = "atomic_store_explain_claim"
_EXPLAINED = sql.Identifier(_NAME)
_PREPARED = "SELECT 1 FROM pg_prepared_statements WHERE name = %s"


@dataclass(frozen=True)
class _Positional:
    """The ``n``-th parameter of a ``PREPARE``d statement, written ``$n``."""

    number: int


class _PositionalDumper(Dumper):
    """Writes a :class:`_Positional` as ``$n``, so psycopg's own client-side binding
    (its placeholder grammar, ``%%`` included) turns a ``%s`` statement into the
    ``$n`` text ``PREPARE`` takes."""

    def dump(self, obj: Any) -> bytes:
        return f"${obj.number}".encode()

    def quote(self, obj: Any) -> bytes:
        return self.dump(obj)


def explain(cur: psycopg.Cursor[Any], statement: bytes, params: list[Any], *, generic: bool) -> str:
    """``EXPLAIN`` of ``statement``; ``generic``: the plan made without the parameters' values.

    PostgreSQL settles on a generic plan for a statement it has run five times, so
    that plan shows whether an index is chosen from the statement text alone.
    """
    selection = sql.SQL(statement.decode())
    if not generic:
        rows = cur.execute(sql.SQL("EXPLAIN {}").format(selection), params).fetchall()
        return "\n".join(row[0] for row in rows)
    # EXPLAIN EXECUTE takes no bound parameters: its arguments are literals, which
    # a client-side cursor on the same connection quotes as psycopg does.
    execute = sql.SQL("EXPLAIN EXECUTE {}").format(_EXPLAINED)
    if params:
        arguments = sql.SQL(", ").join([sql.Placeholder()] * len(params))
        execute = sql.SQL("{}({})").format(execute, arguments)
    positions = [_Positional(number) for number in range(1, len(params) + 1)]
    try:
        with cur.connection.transaction(), psycopg.ClientCursor(cur.connection) as client:
            client.adapters.register_dumper(_Positional, _PositionalDumper)
            client.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            client.execute(sql.SQL("PREPARE {} AS {}").format(_EXPLAINED, selection), positions)
            rows = client.execute(execute, params).fetchall()
    finally:
        if cur.execute(_PREPARED, (_NAME,)).fetchone() is not None:
            cur.execute(sql.SQL("DEALLOCATE PREPARE {}").format(_EXPLAINED))
    return "\n".join(row[0] for row in rows)
