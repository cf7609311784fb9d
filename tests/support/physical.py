"""Direct access to the physical table, for the few tests that must set up
states the public API cannot produce (for example two rows with the same
``created_at``). The storage model is part of the design contract: one table
``atomic_store_rows (table_name, key, value, created_at, record_timestamp)``.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing

PHYSICAL_TABLE = "atomic_store_rows"

_SAME_TIME = (
    "UPDATE {t} SET {col} = (SELECT min({col}) FROM {t} WHERE table_name = {p}) "
    "WHERE table_name = {p}"
)


def give_all_rows_the_same_timestamps(url: str, table: str) -> None:
    """Set ``created_at`` and ``record_timestamp`` of every row of ``table`` to one instant."""
    for column in ("created_at", "record_timestamp"):
        if url.startswith("sqlite:///"):
            statement = _SAME_TIME.format(t=PHYSICAL_TABLE, col=column, p="?")
            with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
                conn.execute(statement, (table, table))
        else:
            import psycopg

            statement = _SAME_TIME.format(t=PHYSICAL_TABLE, col=column, p="%s")
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(statement.encode(), (table, table))


def index_names(url: str) -> set[str]:
    """The indexes on the physical rows table, as the database's catalog lists them."""
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            rows = conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?",
                (PHYSICAL_TABLE,),
            ).fetchall()
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = %s", (PHYSICAL_TABLE,)
            ).fetchall()
    return {name for (name,) in rows}
