"""The scenarios of issues 5, 10 (aged queue), 11 (idempotency keys) 15 (trigger wake-up) and 40 (waiting at scale), by the name the command line uses.

Each scenario module has ``TITLE``, ``run(env, sizes) -> dict`` (plain JSON
data: measurements with their baselines) and ``section(data) -> str`` (its
part of the Markdown report), so adding a scenario means adding one entry.
"""

from __future__ import annotations

from types import ModuleType

from bench.scenarios import (
    aged_queue,
    airflow_dag,
    airflow_deployed,
    claim_throughput,
    delete_drain,
    enqueue,
    hot_key,
    idempotency,
    latency,
    lifecycle,
    scale,
    sqlite_default,
    storage_soak,
    waiters,
    wakeup,
)

SCENARIOS: dict[str, ModuleType] = {
    "claim": claim_throughput,
    "latency": latency,
    "hotkey": hot_key,
    "scale": scale,
    "sqlite": sqlite_default,
    "airflow": airflow_dag,
    "aged": aged_queue,
    "idempotency": idempotency,
    "wakeup": wakeup,
    "soak": storage_soak,
    "lifecycle": lifecycle,
    "deployed": airflow_deployed,
    "delete": delete_drain,
    "enqueue": enqueue,
    "waiters": waiters,
}
