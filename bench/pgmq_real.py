"""pgmq itself: its published SQL functions, installed into the bench server as plain SQL.

The PyPI package ``pgmq`` (1.1.4, the ``bench`` dependency group) ships the
extension's own ``pgmq.sql`` (pgmq 1.13) as ``pgmq/sql/pgmq.sql``; it installs into
a plain PostgreSQL with one ``execute`` and no C extension, and gives the functions
pgmq's clients call: ``pgmq.create``, ``send``, ``send_batch``, ``read``, ``archive``,
``delete``. Its workers call them as pgmq's Python client does (``SELECT * FROM
pgmq.read(…)``), one connection each, so every figure labelled "pgmq" is pgmq's own
code on the same server as the store (:mod:`bench.readdelete_queue` is the
hand-written "pgmq-shaped" reproduction of its statements, kept beside it).

The file is found without importing the package (its ``__init__`` loads a client).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

QUEUE = "bench"
#: the visibility timeout ``read`` sets, seconds (as the pgmq-shaped reproduction)
VT_SECONDS = 30


def sql_path() -> Path | None:
    """``pgmq/sql/pgmq.sql`` of the installed package, or None when it is not installed."""
    spec = importlib.util.find_spec("pgmq")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "sql" / "pgmq.sql"
    return path if path.exists() else None


def available() -> bool:
    return sql_path() is not None


def version() -> str:
    path = sql_path()
    if path is None:
        return "not installed"
    marker = path.parent / "VERSION"
    return marker.read_text().strip() if marker.exists() else "unknown"


def install(url: str) -> None:
    """pgmq's SQL into the database (once: a database that has the schema keeps it)."""
    path = sql_path()
    if path is None:
        raise SystemExit("pgmq is missing: run `make bench` (bench group: pgmq 1.1.4)")
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regnamespace('pgmq') IS NOT NULL").fetchone()
        if not (row and row[0]):
            conn.execute(path.read_text().encode())  # a file of statements, not a literal


def create(url: str) -> None:
    """An empty queue and archive (dropped and created again by pgmq's own functions)."""
    with psycopg.connect(url, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT EXISTS (SELECT FROM pgmq.meta WHERE queue_name = %s)", (QUEUE,)
        )
        if exists.fetchone()[0]:  # type: ignore[index]
            conn.execute("SELECT pgmq.drop_queue(%s)", (QUEUE,))
        conn.execute("SELECT pgmq.create(%s)", (QUEUE,))
        conn.execute(f"VACUUM ANALYZE pgmq.q_{QUEUE}")


def counts(url: str) -> tuple[int, int]:
    """Messages left in the queue, and in the archive."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT (SELECT count(*) FROM pgmq.q_{QUEUE}), (SELECT count(*) FROM pgmq.a_{QUEUE})"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


class Pgmq:
    """One connection's calls of pgmq's functions."""

    def __init__(self, url: str) -> None:
        self.conn: psycopg.Connection[Any] = psycopg.connect(url, autocommit=True)

    def send(self, message: dict[str, Any]) -> int:
        row = self.conn.execute("SELECT * FROM pgmq.send(%s, %s)", (QUEUE, Jsonb(message)))
        return int(row.fetchone()[0])  # type: ignore[index]

    def send_batch(self, messages: list[dict[str, Any]]) -> list[int]:
        rows = self.conn.execute(
            "SELECT * FROM pgmq.send_batch(%s, %s::jsonb[])",
            (QUEUE, [Jsonb(message) for message in messages]),
        )
        return [row[0] for row in rows.fetchall()]

    def read(self, batch: int) -> list[int]:
        """The ids of up to ``batch`` messages (their messages are read, as a consumer would)."""
        rows = self.conn.execute(
            "SELECT msg_id, message FROM pgmq.read(%s, %s, %s)", (QUEUE, VT_SECONDS, batch)
        )
        return [row[0] for row in rows.fetchall()]

    def archive(self, ids: list[int]) -> list[int]:
        rows = self.conn.execute("SELECT * FROM pgmq.archive(%s, %s::bigint[])", (QUEUE, ids))
        return [row[0] for row in rows.fetchall()]

    def delete(self, ids: list[int]) -> list[int]:
        rows = self.conn.execute("SELECT * FROM pgmq.delete(%s, %s::bigint[])", (QUEUE, ids))
        return [row[0] for row in rows.fetchall()]

    def any_left(self) -> bool:
        row = self.conn.execute(f"SELECT EXISTS (SELECT 1 FROM pgmq.q_{QUEUE})").fetchone()
        return bool(row and row[0])

    def close(self) -> None:
        self.conn.close()
