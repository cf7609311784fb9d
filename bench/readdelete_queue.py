"""A pgmq-shaped read-then-delete queue, for the "≥ 2x a read-then-delete queue" target.

pgmq is a PostgreSQL extension; neither PyPI nor this machine's Debian
archive can install it, so this module reproduces its table and its two hot
statements by hand: ``read`` (pick the oldest visible messages ``FOR UPDATE
SKIP LOCKED``, push their visibility timeout forward) and ``delete`` (by id)
— pgmq's queue table layout and its ``read``/``delete`` pair as pgmq 1.x
defines them, not the extension's own code. The report says so.
"""

from __future__ import annotations

from typing import Any

import psycopg

_SCHEMA = """
DROP TABLE IF EXISTS q_bench;
CREATE TABLE q_bench (
    msg_id BIGINT PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
    read_ct INT DEFAULT 0 NOT NULL,
    enqueued_at TIMESTAMPTZ DEFAULT now() NOT NULL,
    vt TIMESTAMPTZ NOT NULL,
    message JSONB
);
CREATE INDEX q_bench_vt_idx ON q_bench (vt ASC);
"""

_LOAD = """
INSERT INTO q_bench (vt, message)
SELECT clock_timestamp(), jsonb_build_object('payload', i) FROM generate_series(1, %s) AS i
"""

_READ = """
WITH cte AS (
    SELECT msg_id FROM q_bench WHERE vt <= clock_timestamp()
    ORDER BY msg_id ASC LIMIT %s FOR UPDATE SKIP LOCKED)
UPDATE q_bench m SET vt = clock_timestamp() + make_interval(secs => %s), read_ct = read_ct + 1
FROM cte WHERE m.msg_id = cte.msg_id
RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message
"""

_DELETE = "DELETE FROM q_bench WHERE msg_id = ANY(%s) RETURNING msg_id"


def load(url: str, rows: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_SCHEMA)
        conn.execute(_LOAD, (rows,))
        conn.execute("VACUUM ANALYZE q_bench")


class ReadDeleteClaimer:
    """Read a batch (invisible for 30 s), then delete it: pgmq's consume loop."""

    def __init__(self, url: str, batch: int) -> None:
        self.conn: psycopg.Connection[Any] = psycopg.connect(url, autocommit=True)
        self.batch = batch

    def claim(self) -> list[str]:
        rows = self.conn.execute(_READ, (self.batch, 30)).fetchall()
        if not rows:
            return []
        ids = [row[0] for row in rows]
        self.conn.execute(_DELETE, (ids,)).fetchall()
        return [str(msg_id) for msg_id in ids]

    def any_left(self) -> bool:
        return self.conn.execute("SELECT EXISTS (SELECT 1 FROM q_bench)").fetchone()[0]  # type: ignore[index]

    def close(self) -> None:
        self.conn.close()
