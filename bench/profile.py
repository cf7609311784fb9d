"""Profile one store primitive in a loop: ``python -m bench.profile claim``.

How the store's per-call costs in bench/analysis.md were found: run the
primitive against a throwaway PostgreSQL server under pyinstrument (the
``bench`` extra) and print where the client's time goes — spec parsing,
statement building, psycopg, or waiting for the server. The server's own
share is the time inside psycopg's ``wait``; compare with ``EXPLAIN ANALYZE``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from airflow_atomic_store import AtomicStore
from bench import loading
from devkit.postgres_server import PostgresServer

GUARD = [{"field": "tokens", "operator": "gt", "value": 0}]
DECREMENT = [{"field": "tokens", "operation": "increment", "value": -1}]


def _operations(store: AtomicStore) -> dict[str, Callable[[], Any]]:
    return {
        "claim": lambda: store.atomic_claim(
            loading.QUEUE, where=loading.PENDING_WHERE, limit=1, execution_id="profile"
        ),
        "update": lambda: store.atomic_update(
            "profile", "tokens", where=GUARD, mutations=DECREMENT
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("operation", choices=["claim", "update"])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    from pyinstrument import Profiler

    with PostgresServer(dbname="profile") as server:
        url = server.url
        loading.create_schema(url)
        pending = args.calls + 100
        loading.load_queue(
            url, pending + loading.history_for(pending), pending=pending, claim_index=True
        )
        with AtomicStore(url) as store:
            store.put("profile", "tokens", {"tokens": 10**12})
            operation = _operations(store)[args.operation]
            for _ in range(50):  # warm the statement caches and prepared statements
                operation()
            profiler = Profiler(interval=0.0002)
            with profiler:
                for _ in range(args.calls):
                    operation()
            print(profiler.output_text(unicode=True, color=False, show_all=False))


if __name__ == "__main__":
    main()
