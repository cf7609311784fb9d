"""Per-call costs on an aged queue: limit-1 claim latency, the stale pass, history growth.

All on the default path (``AtomicStore(url)``, nothing prepared): the first
claim of a filter declares its claimable set, so it is timed on its own
(``first_ms``) and left out of the percentiles. Variants measured on one queue
alternate in rounds, as in the latency scenario.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from airflow_atomic_store import AtomicStore
from bench import loading
from bench.handwritten import TEXT_FILTER, HandwrittenPostgres, pg_table_id
from bench.scenarios import latency
from bench.sizes import Sizes
from bench.timing import now, percentile, progress

QUEUE, PENDING = loading.QUEUE, loading.PENDING_WHERE
#: When the stale rows were claimed by a worker that never finished them.
STALE_STAMP = "2025-01-01T00:00:00.000000Z"

_MAKE_STALE = (
    "UPDATE atomic_store_rows SET value = value || jsonb_build_object('status', 'in_flight', "
    "'claimedAt', %s::text, 'claimedBy', 'lost-worker') WHERE table_id = %s AND key = ANY(%s)"
)
#: What the recipe's per-row task does after a claim: the drained rows become history.
_FINISH = (
    'UPDATE atomic_store_rows SET value = value || \'{"status": "done"}\' '
    "WHERE table_id = %s AND value ->> 'claimedBy' = %s"
)


def stale_where() -> list[dict[str, Any]]:
    """The recovery pass's filter: in flight, claimed more than ten minutes ago."""
    cutoff = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=10)
    return [
        {"field": "status", "operator": "equals", "value": "in_flight"},
        {"field": "claimedAt", "operator": "lt", "value": cutoff.strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
    ]


def load_aged(url: str, pending: int, history: int) -> None:
    loading.load_queue(url, pending + history, pending=pending, claim_index=False)


def _time(op: Callable[[], Any], calls: int) -> tuple[list[float], list[Any]]:
    samples, results = [], []
    for _ in range(calls):
        start = now()
        results.append(op())
        samples.append(now() - start)
    return samples, results


def _summary(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": percentile(samples, 50) * 1000, "p99_ms": percentile(samples, 99) * 1000}


def claim_latency(url: str, sizes: Sizes) -> dict[str, Any]:
    """Limit-1 claims on the aged queue against the latency scenario's guarded update.

    The hand-written claim (hand-made partial index) and guarded update run in
    the same rounds: their ratio is what this table layout allows.
    """
    pending = sizes.aged_pending
    history = pending * sizes.aged_history_factor
    loading.load_queue(url, pending + history, pending=pending, claim_index=False, hand_index=True)
    calls = min(sizes.aged_latency_calls, (pending - 200) // 2)
    sql = HandwrittenPostgres(url)
    with AtomicStore(url) as store:
        store.put(latency.TABLE, "tokens", {"tokens": 10**12})
        ops = {
            "claim": lambda: store.atomic_claim(
                QUEUE, where=PENDING, limit=1, execution_id="aged-latency"
            ),
            "update": lambda: store.atomic_update(
                latency.TABLE, "tokens", where=latency.GUARD, mutations=latency.DECREMENT
            ),
            "sql_claim": lambda: sql.claim(QUEUE, 1, "aged-latency", TEXT_FILTER),
            "sql_update": lambda: sql.guarded_decrement(latency.TABLE, "tokens"),
        }
        first = _time(ops["claim"], 1)[0][0]  # declares the claimable set
        for op in ops.values():
            _time(op, 20)
        samples: dict[str, list[float]] = {name: [] for name in ops}
        per_round = max(1, calls // sizes.latency_rounds)
        names = list(ops)
        for number in range(sizes.latency_rounds):
            for name in names[number % 4 :] + names[: number % 4]:
                samples[name] += _time(ops[name], per_round)[0]
    sql.close()
    result: dict[str, Any] = {name: _summary(values) for name, values in samples.items()}
    result.update(calls=len(samples["claim"]), first_ms=first * 1000)
    result["plan"] = loading.claim_plan(url, 1, generic=True)
    progress(
        f"aged latency: claim p50 {result['claim']['p50_ms']:.3f} ms, "
        f"guarded update p50 {result['update']['p50_ms']:.3f} ms; hand-written "
        f"{result['sql_claim']['p50_ms']:.3f} / {result['sql_update']['p50_ms']:.3f} ms"
    )
    return result


def stale_pass(url: str, sizes: Sizes) -> dict[str, Any]:
    """The recovery pass on the aged queue, in blocks alternating with the drain's claim."""
    pending, stale = sizes.aged_pending, sizes.aged_stale_rows
    history = pending * sizes.aged_history_factor
    load_aged(url, pending, history)
    # The newest history rows went stale: a walk in claim order meets the whole history first.
    stale_keys = [f"job-{i:08d}" for i in range(history - stale + 1, history + 1)]
    block = max(1, min(stale // 10, sizes.aged_stale_calls))
    rounds = max(1, sizes.aged_stale_calls // block)
    samples: dict[str, list[float]] = {"stale": [], "drain": []}
    claimed: list[int] = []
    with loading.connect(url) as conn, AtomicStore(url) as store:
        table_id = pg_table_id(conn, QUEUE)

        def reset() -> None:
            conn.execute(_MAKE_STALE, (STALE_STAMP, table_id, stale_keys))
            conn.execute(_FINISH, (table_id, "aged-drain"))

        reset()
        loading.vacuum(url)
        ops = {
            "stale": lambda: store.atomic_claim(
                QUEUE, where=stale_where(), limit=10, execution_id="aged-recovery"
            )["count"],
            "drain": lambda: store.atomic_claim(
                QUEUE, where=PENDING, limit=10, execution_id="aged-drain"
            )["count"],
        }
        first = {name: _time(op, 1)[0][0] * 1000 for name, op in ops.items()}  # declare sets
        for number in range(rounds):
            reset()
            for name in ops if number % 2 == 0 else reversed(ops):
                times, counts = _time(ops[name], block)
                samples[name] += times
                if name == "stale":
                    claimed += counts
    result: dict[str, Any] = {name: _summary(values) for name, values in samples.items()}
    result.update(
        stale_rows=stale,
        calls=len(samples["stale"]),
        stale_rows_per_call=sum(claimed) / len(claimed) if claimed else 0.0,
        first_ms=first,
        plan_stale=loading.claim_plan(url, 10, generic=True, where=stale_where()),
        plan_drain=loading.claim_plan(url, 10, generic=True),
    )
    progress(
        f"aged stale pass: p50 {result['stale']['p50_ms']:.3f} ms, "
        f"drain claim p50 {result['drain']['p50_ms']:.3f} ms"
    )
    return result


def history_curve(url: str, sizes: Sizes) -> list[dict[str, Any]]:
    """Limit-10 claim p50 over growing history; the smallest size again at the end (drift)."""
    claims = sizes.aged_history_claims
    pending = max(sizes.aged_history_pending, 10 * (claims + 10))
    entries = []
    runs = [*sizes.aged_history_rows, sizes.aged_history_rows[0]]
    for number, history in enumerate(runs):
        load_aged(url, pending, history)
        with AtomicStore(url) as store:
            store.get(QUEUE, "__warm-up__")

            def claim() -> int:
                return store.atomic_claim(QUEUE, where=PENDING, limit=10, execution_id="aged")[
                    "count"
                ]

            first = _time(claim, 1)[0][0]  # declares the claimable set
            _time(claim, 5)
            samples, counts = _time(claim, claims)
        assert all(count == 10 for count in counts), counts
        entry = {
            "history": history,
            "pending": pending,
            "again": number == len(runs) - 1,
            "first_ms": first * 1000,
            **_summary(samples),
            "plan": loading.claim_plan(url, 10, generic=True),
        }
        entries.append(entry)
        progress(f"aged history {history:,}: claim of 10 p50 {entry['p50_ms']:.3f} ms")
    return entries
