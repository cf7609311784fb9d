"""Store ÷ baseline ratios across store changes, from saved runs.

When a store change comes out of these benchmarks, the full run before it is
kept in ``bench/results/`` (listed in :data:`SAVED_RUNS`, oldest first); the
report then shows each store ÷ baseline ratio in every saved run and in this
one, side by side. Only ratios are compared: the runs saw different background
load on a shared machine, but within each run the store and its baseline
shared it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.report_format import table

RESULTS = Path(__file__).with_name("results")

#: (column label, saved run, what changed after it), oldest first.
SAVED_RUNS = (
    ("round 1 before", RESULTS / "before-store-patches.json", "spec re-parsing, PL/pgSQL loops"),
    (
        "round 2 before",
        RESULTS / "before-round-2.json",
        "increments in SQL, literal claim limit, reused cursor",
    ),
)


def _ratios(data: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for e in data.get("claim", {}).get("store_vs_sql", []):
        if e["index"] and e["sql"]["rate"]:
            name = f"claim, index, {e['processes']} claimers, batch {e['batch']} (rows/s)"
            out[name] = e["store"]["rate"] / e["sql"]["rate"]
    for e in data.get("latency", {}).get("operations", []):
        out[f"{e['operation']} (p50, SQL ÷ store)"] = e["sql"]["p50_ms"] / e["store"]["p50_ms"]
    hot = data.get("hotkey")
    if hot:
        out["hot key increments (ops/s)"] = hot["store"]["ops_per_s"] / hot["sql"]["ops_per_s"]
    return out


def section(
    after: dict[str, Any], saved_runs: tuple[tuple[str, Path, str], ...] = SAVED_RUNS
) -> str | None:
    """A Markdown table of store ÷ baseline per saved run and now, or None without saved runs."""
    runs = [
        (label, json.loads(path.read_text()), change)
        for label, path, change in saved_runs
        if path.exists()
    ]
    if not runs:
        return None
    earlier = [_ratios(data) for _, data, _ in runs]
    now = _ratios(after)
    rows = [
        [
            name,
            *(f"{ratios[name]:.2f}" if name in ratios else "-" for ratios in earlier),
            f"{now[name]:.2f}",
        ]
        for name in now
        if any(name in ratios for ratios in earlier)
    ]
    if not rows:
        return None
    described = [
        f"*{label}*: {data['meta']['date']}, store at "
        f"{data['meta']['machine'].get('store code', 'an earlier commit')}; then: {change}."
        for label, data, change in runs
    ]
    return "\n".join(
        [
            "Store speed as a fraction of the hand-written baseline (1.00 = as fast) in the "
            "full runs made before each round of store changes these benchmarks led to, and "
            "in this run. Higher is better.",
            "",
            *(f"- {line}" for line in described),
            "",
            *table(["figure", *(label for label, _, _ in runs), "this run"], rows),
        ]
    )
