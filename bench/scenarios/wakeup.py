"""Issue 15: how fast a trigger wakes, and what notifying from claims would cost.

- **Wake-up** (PostgreSQL and SQLite): a ``ClaimableRowsTrigger`` runs in an event
  loop as in the triggerer; a write commits a pending row and the time until the
  trigger yields its event is taken, then the row is claimed (which re-arms the
  trigger: its head moved) and the next row is written. PostgreSQL wakes on the
  store's ``pg_notify``; SQLite polls every ``poll_interval`` (here 0.5 s), so its
  figure is about half that.
- **Notify on claims**: the aged-queue drain of scenario 7 (4 claimer processes,
  pending rows under 10x as many done), the store with its default
  ``notify="writes"`` (claims do not notify) against ``notify="all"`` (each claim
  that took rows notifies its table's channel; PostgreSQL serialises the commits
  of notifying transactions), in alternating order, on freshly loaded tables.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

from airflow_atomic_store import AtomicStore
from bench import loading
from bench.drainers import run_drain
from bench.environment import BenchEnvironment
from bench.sizes import Sizes
from bench.timing import percentile, progress

TITLE = "Trigger wake-up"

TABLE = "wakeup"
PENDING = [{"field": "status", "operator": "equals", "value": "pending"}]
SQLITE_POLL = 0.5
PG_POLL = 2.0  # the fallback: a write the LISTEN misses is seen within it
_CONN_ID = "atomic_store_bench_wakeup"


def _wakeups(url: str, rounds: int, poll_interval: float) -> list[float]:
    """Seconds from each committed write to the trigger's event."""
    os.environ[f"AIRFLOW_CONN_{_CONN_ID.upper()}"] = url
    from airflow_atomic_store.triggers import ClaimableRowsTrigger

    async def measure() -> list[float]:
        trigger = ClaimableRowsTrigger(
            conn_id=_CONN_ID, table=TABLE, where=PENDING, poll_interval=poll_interval
        )
        events = trigger.run()
        samples: list[float] = []
        with AtomicStore(url) as store:
            pending = asyncio.ensure_future(anext(events))
            await asyncio.sleep(0.5)  # listening, first count done
            for n in range(rounds):
                await asyncio.to_thread(store.put, TABLE, f"w{n:05d}", {"status": "pending"})
                committed = time.perf_counter()
                await pending
                samples.append(time.perf_counter() - committed)
                await asyncio.to_thread(store.atomic_claim, TABLE, where=PENDING, limit=10)
                pending = asyncio.ensure_future(anext(events))
                # A write at a random phase of the poll, as a producer's would be.
                await asyncio.sleep(random.uniform(0.05, 0.05 + poll_interval))
            pending.cancel()  # closes the trigger's connections, as the triggerer's cancel does
            await asyncio.gather(pending, return_exceptions=True)
        return samples

    return asyncio.run(measure())


def _summary(samples: list[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "p50_ms": percentile(samples, 50) * 1000,
        "p95_ms": percentile(samples, 95) * 1000,
        "max_ms": max(samples) * 1000,
    }


def _notify_cost(url: str, sizes: Sizes) -> list[dict[str, Any]]:
    rows = []
    kinds = {"writes": "store", "all": "store_notify_all"}
    for turn, batch in enumerate((1, 10)):
        entry: dict[str, Any] = {"batch": batch, "processes": 4}
        order = list(kinds) if turn % 2 == 0 else list(reversed(kinds))
        for _ in range(2):  # each variant twice, alternating
            for name in order:
                total = sizes.aged_pending * (1 + sizes.aged_history_factor)
                loading.load_queue(url, total, pending=sizes.aged_pending, claim_index=True)
                result = run_drain(kinds[name], url, batch, 4, sizes.aged_cap_seconds)
                entry.setdefault(name, []).append(result["rate"])
        entry["ratio"] = sum(entry["all"]) / sum(entry["writes"])
        rows.append(entry)
        progress(
            f"notify cost batch={batch}: writes {entry['writes']}, all {entry['all']} rows/s, "
            f"all/writes {entry['ratio']:.2f}"
        )
    return rows


def run(env: BenchEnvironment, sizes: Sizes, *, require_extras: bool) -> dict[str, Any]:
    url = env.postgres_url()
    loading.create_schema(url)
    rounds = max(20, sizes.aged_latency_calls // 30)
    data: dict[str, Any] = {
        "postgres": _summary(_wakeups(url, rounds, poll_interval=PG_POLL)),
        "sqlite": _summary(_wakeups(env.sqlite_url("wakeup"), rounds, SQLITE_POLL)),
        "sqlite_poll_interval": SQLITE_POLL,
        "notify_cost": _notify_cost(url, sizes),
    }
    progress(
        f"wake-up p50: postgres {data['postgres']['p50_ms']:.1f} ms, sqlite {data['sqlite']['p50_ms']:.0f} ms"
    )
    return data


def section(data: dict[str, Any]) -> str:
    pg, lite = data["postgres"], data["sqlite"]
    lines = [
        "Committed write → the trigger's event (`ClaimableRowsTrigger`, one process):",
        "",
        "| backend | wakes on | n | p50 | p95 | max |",
        "|---|---|---:|---:|---:|---:|",
        f"| PostgreSQL | `LISTEN` (poll every {PG_POLL:g} s as fallback) | {pg['n']} | "
        f"{pg['p50_ms']:.1f} ms | {pg['p95_ms']:.1f} ms | {pg['max_ms']:.1f} ms |",
        f"| SQLite | poll every {data['sqlite_poll_interval']:g} s | {lite['n']} | "
        f"{lite['p50_ms']:.0f} ms | {lite['p95_ms']:.0f} ms | {lite['max_ms']:.0f} ms |",
        "",
        'Aged-queue drain, 4 claimer processes, claims notifying (`notify="all"`) or not '
        '(`"writes"`, the default), rows/s of two drains each, alternating:',
        "",
        "| batch | writes (default) | all | all / writes |",
        "|---:|---|---|---:|",
    ]
    for row in data["notify_cost"]:
        lines.append(
            f"| {row['batch']} | {', '.join(f'{r:,.0f}' for r in row['writes'])} | "
            f"{', '.join(f'{r:,.0f}' for r in row['all'])} | {row['ratio']:.2f} |"
        )
    return "\n".join(lines) + "\n"
