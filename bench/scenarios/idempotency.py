"""Issue 11: what an idempotency key costs a call, keyed and unkeyed calls side by side.

One process, one store, PostgreSQL. Each operation runs with a fresh key per
call (the cost of a first try, which writes its receipt with the effect) and
without a key, alternating in rounds so machine noise lands on both alike.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from airflow_atomic_store import AtomicStore
from bench import loading
from bench.environment import BenchEnvironment
from bench.scenarios.latency import DECREMENT, GUARD, INCREMENT, alternating
from bench.sizes import Sizes
from bench.timing import progress

TITLE = "Idempotency keys"

TABLE = "keyed"

Call = Callable[[str | None], Any]


def _calls(store: AtomicStore) -> dict[str, Call]:
    """Per operation, a call taking the key (or None)."""
    return {
        "atomic_update (guarded decrement)": lambda key: store.atomic_update(
            TABLE, "tokens", where=GUARD, mutations=DECREMENT, idempotency_key=key
        ),
        "atomic_upsert (on-conflict increment)": lambda key: store.atomic_upsert(
            TABLE, "counter", insert_value={"n": 1}, mutations=INCREMENT, idempotency_key=key
        ),
        "atomic_claim (limit 1, claimable set)": lambda key: store.atomic_claim(
            loading.QUEUE, where=loading.PENDING_WHERE, limit=1, idempotency_key=key
        ),
    }


def _with_fresh_key(call: Call, keys: Iterator[str]) -> Any:
    return call(next(keys))


def run(env: BenchEnvironment, sizes: Sizes, *, require_extras: bool) -> dict[str, Any]:
    url = env.postgres_url()
    loading.create_schema(url)
    pending = 2 * sizes.latency_calls + 1000
    loading.load_queue(
        url, pending + loading.history_for(pending), pending=pending, claim_index=True
    )
    keys = (f"bench-{n}" for n in itertools.count())
    store = AtomicStore(url)
    try:
        store.put(TABLE, "tokens", {"tokens": 10**12})
        store.put(TABLE, "counter", {"n": 0})
        results = []
        for name, call in _calls(store).items():
            keyed = functools.partial(_with_fresh_key, call, keys)
            plain = functools.partial(call, None)
            entry = {"operation": name, **alternating({"keyed": keyed, "plain": plain}, sizes)}
            results.append(entry)
            progress(
                f"idempotency {name}: keyed p50 {entry['keyed']['p50_ms']:.3f} ms, "
                f"plain p50 {entry['plain']['p50_ms']:.3f} ms"
            )
    finally:
        store.close()
    return {"operations": results}


def section(data: dict[str, Any]) -> str:
    from bench.report_format import ratio, table

    body = [
        [
            e["operation"],
            str(e["calls"]),
            f"{e['keyed']['p50_ms']:.3f}",
            f"{e['plain']['p50_ms']:.3f}",
            ratio(e["keyed"]["p50_ms"], e["plain"]["p50_ms"]),
            f"{e['keyed']['p99_ms']:.3f}",
            f"{e['plain']['p99_ms']:.3f}",
        ]
        for e in data["operations"]
    ]
    lines = [
        "One process, one connection; milliseconds per call, a fresh idempotency key per "
        "keyed call (its receipt is written with the effect), keyed and unkeyed calls "
        "alternating in rounds.",
        "",
        *table(
            [
                "operation",
                "calls",
                "keyed p50",
                "no key p50",
                "p50 ratio",
                "keyed p99",
                "no key p99",
            ],
            body,
        ),
    ]
    return "\n".join(lines)
