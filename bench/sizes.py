"""How big each scenario runs: full (``make bench``), quick (< 1 minute) and tiny (smoke test).

One frozen record per mode keeps every size in one place, so the report can
print exactly what was measured and the smoke test exercises the same code
paths as the full run, only smaller.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    mode: str
    #: scenario 1: rows per drain, claimer processes, batch sizes, and a time cap per drain
    drain_rows: int
    drain_processes: tuple[int, ...]
    drain_batches: tuple[int, ...]
    drain_cap_seconds: float
    #: scenario 1: rows for the naive select-then-update race
    naive_rows: int
    naive_processes: tuple[int, ...]
    #: scenario 2: calls per operation and variant (split into interleaved rounds)
    latency_calls: int
    latency_rounds: int
    #: scenario 3: processes and increments per process on one hot key
    hot_processes: int
    hot_increments: int
    hot_repeats: int
    #: scenario 4: table sizes (1% pending), claims of 10 per block, and blocks per variant
    #: with the claim index (alternating store and SQL; unindexed claims get one block)
    scale_rows: tuple[int, ...]
    scale_claims: int
    scale_rounds: int
    #: scenario 5: SQLite operations per process, and process counts
    sqlite_ops: int
    sqlite_processes: tuple[int, ...]
    #: scenario 6: rows the dispatcher DAG claims (and maps over), runs after the first
    #: (warm-up) run, and the backends
    dag_rows: int
    dag_runs: int
    dag_backends: tuple[str, ...]
    #: scenario 7 (aged queue): pending rows under ``aged_history_factor`` times as many done
    #: rows; claimer processes, batch sizes and a time cap per drain
    aged_pending: int
    aged_history_factor: int
    aged_processes: tuple[int, ...]
    aged_batches: tuple[int, ...]
    aged_cap_seconds: float
    #: more alternations of the four drains at the targets' configuration (4 claimers,
    #: batch 10): the targets read their medians, since one drain moves by ±15 %
    aged_target_repeats: int
    #: limit-1 claims and guarded updates per variant (in ``latency_rounds`` rounds)
    aged_latency_calls: int
    #: stale in_flight rows under the aged history, and stale-pass calls in all
    aged_stale_rows: int
    aged_stale_calls: int
    #: done rows for the claim-cost curve, the pending rows above them, claims of 10 per size
    aged_history_rows: tuple[int, ...]
    aged_history_pending: int
    aged_history_claims: int
    #: SQLite drains per variant (variants alternate)
    aged_sqlite_rounds: int
    #: storage soak (issue 33): cycles of enqueue -> claim -> done -> retire, items per cycle
    soak_cycles: int = 30
    soak_items: int = 5_000
    #: lifecycle (issue 33): items per run, alternations of the four variants, a time cap
    lifecycle_items: int = 4_000
    lifecycle_rounds: int = 3
    lifecycle_cap_seconds: float = 60.0
    #: enqueue (issue 42): items one producer hands in per variant, alternations
    enqueue_items: int = 10_000
    enqueue_rounds: int = 3
    #: through Airflow, deployed (issue 33): items for the mapped and the batch recipe
    dispatch_mapped_items: int = 200
    dispatch_batch_items: int = 1_000


FULL = Sizes(
    mode="full",
    drain_rows=50_000,
    drain_processes=(1, 2, 4, 8),
    drain_batches=(1, 10, 100),
    drain_cap_seconds=12.0,
    naive_rows=5_000,
    naive_processes=(4, 8),
    latency_calls=3_000,
    latency_rounds=6,
    hot_processes=8,
    hot_increments=1_000,
    hot_repeats=2,
    scale_rows=(10_000, 100_000, 1_000_000),
    scale_claims=10,
    scale_rounds=3,
    sqlite_ops=2_000,
    sqlite_processes=(1, 4),
    dag_rows=100,
    dag_runs=1,
    dag_backends=("postgres", "sqlite"),
    aged_pending=20_000,
    aged_history_factor=10,
    aged_processes=(1, 2, 4, 8),
    aged_batches=(1, 10, 100),
    aged_cap_seconds=12.0,
    aged_target_repeats=4,
    aged_latency_calls=3_000,
    aged_stale_rows=300,
    aged_stale_calls=300,
    aged_history_rows=(10_000, 100_000, 1_000_000),
    aged_history_pending=2_000,
    aged_history_claims=150,
    aged_sqlite_rounds=2,
)

QUICK = Sizes(
    mode="quick",
    drain_rows=1_000,
    drain_processes=(4,),
    drain_batches=(10,),
    drain_cap_seconds=2.0,
    naive_rows=1_000,
    naive_processes=(4,),
    latency_calls=200,
    latency_rounds=3,
    hot_processes=4,
    hot_increments=100,
    hot_repeats=1,
    scale_rows=(2_000, 20_000),
    scale_claims=5,
    scale_rounds=1,
    sqlite_ops=100,
    sqlite_processes=(4,),
    dag_rows=5,
    dag_runs=0,
    dag_backends=("postgres",),
    aged_pending=2_000,
    aged_history_factor=10,
    aged_processes=(4,),
    aged_batches=(10,),
    aged_cap_seconds=3.0,
    aged_target_repeats=1,
    aged_latency_calls=300,
    aged_stale_rows=200,
    aged_stale_calls=60,
    aged_history_rows=(10_000, 100_000),
    aged_history_pending=500,
    aged_history_claims=30,
    aged_sqlite_rounds=1,
    soak_cycles=10,
    soak_items=1_000,
    lifecycle_items=1_000,
    lifecycle_rounds=1,
    lifecycle_cap_seconds=10.0,
    enqueue_items=2_000,
    enqueue_rounds=1,
    dispatch_mapped_items=20,
    dispatch_batch_items=100,
)

TINY = Sizes(
    mode="tiny",
    drain_rows=200,
    drain_processes=(2,),
    drain_batches=(10,),
    drain_cap_seconds=2.0,
    naive_rows=200,
    naive_processes=(2,),
    latency_calls=20,
    latency_rounds=2,
    hot_processes=2,
    hot_increments=20,
    hot_repeats=1,
    scale_rows=(1_000,),
    scale_claims=2,
    scale_rounds=1,
    sqlite_ops=20,
    sqlite_processes=(2,),
    dag_rows=3,
    dag_runs=0,
    dag_backends=("sqlite",),
    aged_pending=200,
    aged_history_factor=10,
    aged_processes=(2,),
    aged_batches=(10,),
    aged_cap_seconds=2.0,
    aged_target_repeats=1,
    aged_latency_calls=20,
    aged_stale_rows=40,
    aged_stale_calls=8,
    aged_history_rows=(1_000, 5_000),
    aged_history_pending=100,
    aged_history_claims=5,
    aged_sqlite_rounds=1,
    soak_cycles=3,
    soak_items=50,
    lifecycle_items=80,
    lifecycle_rounds=1,
    lifecycle_cap_seconds=10.0,
    enqueue_items=100,
    enqueue_rounds=1,
    dispatch_mapped_items=3,
    dispatch_batch_items=10,
)

MODES = {sizes.mode: sizes for sizes in (FULL, QUICK, TINY)}
