"""Direct access to the physical table, for the few tests that must set up
states the public API cannot produce (for example two rows with the same
``created_at``). The storage model (docs/backends.md): one table
``atomic_store_rows (table_name, key, value, created_at, record_timestamp)`` on
SQLite; on PostgreSQL ``table_id`` in place of ``table_name``, the logical
table's id in ``atomic_store_rows_tables (id, name)``.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

PHYSICAL_TABLE = "atomic_store_rows"
#: A PostgreSQL condition on the rows table: the rows of the logical table bound to ``%s``.
PG_ROWS_OF = f"table_id = (SELECT id FROM {PHYSICAL_TABLE}_tables WHERE name = %s)"

_SAME_TIME = "UPDATE {t} SET {col} = (SELECT min({col}) FROM {t} WHERE {rows_of}) WHERE {rows_of}"


def give_all_rows_the_same_timestamps(url: str, table: str) -> None:
    """Set ``created_at`` and ``record_timestamp`` of every row of ``table`` to one instant."""
    for column in ("created_at", "record_timestamp"):
        if url.startswith("sqlite:///"):
            statement = _SAME_TIME.format(t=PHYSICAL_TABLE, col=column, rows_of="table_name = ?")
            with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
                conn.execute(statement, (table, table))
        else:
            import psycopg

            statement = _SAME_TIME.format(t=PHYSICAL_TABLE, col=column, rows_of=PG_ROWS_OF)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(statement.encode(), (table, table))


def index_names(url: str, table: str = PHYSICAL_TABLE) -> set[str]:
    """The indexes on a physical rows table, as the database's catalog lists them."""
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            rows = conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?",
                (table,),
            ).fetchall()
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = %s", (table,)
            ).fetchall()
    return {name for (name,) in rows}


def store_objects(url: str) -> list[str] | None:
    """Every table and index where ``url``'s store is or would be, read without creating
    any: the SQLite file's (None when there is no file) or the PostgreSQL role's schema's."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.exists():
            return None
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            return sorted(name for (name,) in conn.execute("SELECT name FROM sqlite_master"))
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = "
            "(SELECT oid FROM pg_namespace WHERE nspname = current_schema())"
        ).fetchall()
    return sorted(name for (name,) in rows)


def journal_mode(path: Path) -> str:
    """A SQLite file's journal mode, read without changing it."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])


def nowhere_url(store_url: str, tmp_path: Path) -> str:
    """A URL where no store is (nothing has opened ``store_url`` yet): the test's fresh
    PostgreSQL schema, or a SQLite file two missing directories under ``tmp_path``."""
    if store_url.startswith("sqlite:///"):
        return f"sqlite:///{tmp_path / 'nested' / 'dir' / 'store.db'}"
    return store_url
