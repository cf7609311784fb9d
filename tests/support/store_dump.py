"""Every object and row of a store, as text: to show that a refused call changed nothing.

A store is more than its rows table: the tables catalog and its id sequence
(PostgreSQL), the receipts, the claimable sets and their indexes. The dump holds
the schema's objects (names and, where the database keeps it, their definitions),
every row of every table in a fixed order with each column as its database text,
and each sequence's position, so equal dumps mean nothing was written, not even a
receipt, a catalog entry or a set's index.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

Dump = dict[str, list[Any]]


def dump_store(store_url: str) -> Dump:
    if store_url.startswith("sqlite:///"):
        return _dump_sqlite(store_url.removeprefix("sqlite:///"))
    return _dump_postgres(store_url)


def _dump_sqlite(path: str) -> Dump:
    with closing(sqlite3.connect(path)) as conn:
        objects = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()
        dump: Dump = {"objects": objects}
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
        ).fetchall():
            quoted = '"' + name.replace('"', '""') + '"'
            rows = conn.execute(f"SELECT * FROM {quoted}").fetchall()
            dump[f"table {name}"] = sorted(map(repr, rows))
    return dump


def _dump_postgres(url: str) -> Dump:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()[0]  # type: ignore[index]
        objects = conn.execute(
            "SELECT c.relkind::text, c.relname::text, "
            "coalesce(pg_get_indexdef(c.oid), '') FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s ORDER BY 1, 2",
            (schema,),
        ).fetchall()
        functions = conn.execute(
            "SELECT p.proname::text, md5(pg_get_functiondef(p.oid)) FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s ORDER BY 1, 2",
            (schema,),
        ).fetchall()
        dump: Dump = {"objects": objects, "functions": functions}
        for kind, name, _ in objects:
            target = sql.Identifier(schema, name)
            if kind == "r":
                rows = conn.execute(
                    sql.SQL("SELECT row_to_json(t)::text FROM {} t").format(target)
                ).fetchall()
                dump[f"table {name}"] = sorted(row[0] for row in rows)
            elif kind == "S":
                dump[f"sequence {name}"] = list(
                    conn.execute(sql.SQL("SELECT last_value, is_called FROM {}").format(target))
                )
    return dump
