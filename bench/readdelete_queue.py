"""A pgmq-shaped queue: ``send``, ``read``, ``delete``, ``archive`` and ``pop``.

pgmq is a PostgreSQL extension; neither PyPI nor this machine's Debian
archive can install it, so this module reproduces its two tables and its hot
statements by hand, as pgmq 1.x shapes them: the queue table (``msg_id``
identity, ``read_ct``, ``enqueued_at``, ``vt``, ``message``) with its ``vt``
index, and the archive table (the same columns plus ``archived_at``);
``send`` (one INSERT … RETURNING ``msg_id``), ``read`` (pick the oldest
visible messages ``FOR UPDATE SKIP LOCKED``, push their visibility timeout
forward), ``delete`` (by ids), ``archive`` (a DELETE … RETURNING by ids feeding
an INSERT into the archive, one statement) and ``pop`` (a single DELETE …
RETURNING of the oldest visible messages, SKIP LOCKED). It is pgmq's layout and
statements, not the extension's own code; the report says so.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

_SCHEMA = """
DROP TABLE IF EXISTS q_bench;
DROP TABLE IF EXISTS a_bench;
CREATE TABLE q_bench (
    msg_id BIGINT PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
    read_ct INT DEFAULT 0 NOT NULL,
    enqueued_at TIMESTAMPTZ DEFAULT now() NOT NULL,
    vt TIMESTAMPTZ NOT NULL,
    message JSONB
);
CREATE INDEX q_bench_vt_idx ON q_bench (vt ASC);
CREATE TABLE a_bench (
    msg_id BIGINT PRIMARY KEY,
    read_ct INT DEFAULT 0 NOT NULL,
    enqueued_at TIMESTAMPTZ DEFAULT now() NOT NULL,
    archived_at TIMESTAMPTZ DEFAULT now() NOT NULL,
    vt TIMESTAMPTZ NOT NULL,
    message JSONB
);
CREATE INDEX a_bench_archived_at_idx ON a_bench (archived_at);
"""

_LOAD = """
INSERT INTO q_bench (vt, message)
SELECT clock_timestamp(), jsonb_build_object('payload', i) FROM generate_series(1, %s) AS i
"""

_SEND = "INSERT INTO q_bench (vt, message) VALUES (clock_timestamp(), %s) RETURNING msg_id"

_READ = """
WITH cte AS (
    SELECT msg_id FROM q_bench WHERE vt <= clock_timestamp()
    ORDER BY msg_id ASC LIMIT %s FOR UPDATE SKIP LOCKED)
UPDATE q_bench m SET vt = clock_timestamp() + make_interval(secs => %s), read_ct = read_ct + 1
FROM cte WHERE m.msg_id = cte.msg_id
RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message
"""

_DELETE = "DELETE FROM q_bench WHERE msg_id = ANY(%s) RETURNING msg_id"

_ARCHIVE = """
WITH archived AS (
    DELETE FROM q_bench WHERE msg_id = ANY(%s)
    RETURNING msg_id, vt, read_ct, enqueued_at, message)
INSERT INTO a_bench (msg_id, vt, read_ct, enqueued_at, message)
SELECT msg_id, vt, read_ct, enqueued_at, message FROM archived
RETURNING msg_id
"""

_POP = """
WITH cte AS (
    SELECT msg_id FROM q_bench WHERE vt <= clock_timestamp()
    ORDER BY msg_id ASC LIMIT %s FOR UPDATE SKIP LOCKED)
DELETE FROM q_bench WHERE msg_id = ANY(SELECT msg_id FROM cte)
RETURNING msg_id, read_ct, enqueued_at, vt, message
"""

#: the visibility timeout ``read`` sets, seconds (pgmq's callers pass one)
VT_SECONDS = 30


def create(url: str) -> None:
    """Empty queue and archive tables (dropped and made again)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_SCHEMA)


def load(url: str, rows: int) -> None:
    create(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_LOAD, (rows,))
        conn.execute("VACUUM ANALYZE q_bench")


def counts(url: str) -> tuple[int, int]:
    """Messages left in the queue, and in the archive."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM q_bench), (SELECT count(*) FROM a_bench)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


class PgmqShaped:
    """One connection's ``send``/``read``/``delete``/``archive``/``pop``."""

    def __init__(self, url: str) -> None:
        self.conn: psycopg.Connection[Any] = psycopg.connect(url, autocommit=True)

    def send(self, message: dict[str, Any]) -> int:
        row = self.conn.execute(_SEND, (Jsonb(message),)).fetchone()
        assert row is not None
        return int(row[0])

    def read(self, batch: int) -> list[int]:
        return [row[0] for row in self.conn.execute(_READ, (batch, VT_SECONDS)).fetchall()]

    def delete(self, ids: list[int]) -> list[int]:
        return [row[0] for row in self.conn.execute(_DELETE, (ids,)).fetchall()]

    def archive(self, ids: list[int]) -> list[int]:
        return [row[0] for row in self.conn.execute(_ARCHIVE, (ids,)).fetchall()]

    def pop(self, batch: int) -> list[int]:
        return [row[0] for row in self.conn.execute(_POP, (batch,)).fetchall()]

    def any_left(self) -> bool:
        return self.conn.execute("SELECT EXISTS (SELECT 1 FROM q_bench)").fetchone()[0]  # type: ignore[index]

    def close(self) -> None:
        self.conn.close()


class ReadDeleteClaimer(PgmqShaped):
    """Read a batch (invisible for 30 s), then delete it: pgmq's consume loop."""

    def __init__(self, url: str, batch: int) -> None:
        super().__init__(url)
        self.batch = batch

    def claim(self) -> list[str]:
        ids = self.read(self.batch)
        if not ids:
            return []
        self.delete(ids)
        return [str(msg_id) for msg_id in ids]


class PopClaimer(ReadDeleteClaimer):
    """``pop``: one DELETE … RETURNING of the oldest visible messages (at most once)."""

    def claim(self) -> list[str]:
        return [str(msg_id) for msg_id in self.pop(self.batch)]
