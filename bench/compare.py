"""Before/after ratios for a store change, from two saved runs.

When a store change comes out of these benchmarks, the run before it is kept
in ``bench/results/before-store-patches.json``; the report then shows each
store ÷ baseline ratio before and after, side by side. Only ratios are
compared: the two runs saw different background load on a shared machine,
but within each run the store and its baseline shared it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.report_format import table

BEFORE = Path(__file__).with_name("results") / "before-store-patches.json"


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


def section(after: dict[str, Any], before_path: Path = BEFORE) -> str | None:
    """A Markdown table of store ÷ baseline before and after, or None without a saved run."""
    if not before_path.exists():
        return None
    before_data = json.loads(before_path.read_text())
    before, now = _ratios(before_data), _ratios(after)
    rows = [[name, f"{before[name]:.2f}", f"{now[name]:.2f}"] for name in now if name in before]
    if not rows:
        return None
    commit = before_data["meta"]["machine"].get("store code", "the commit before")
    return "\n".join(
        [
            f"Store speed as a fraction of the hand-written baseline (1.00 = as fast), in the "
            f"run before the store changes this page led to ({before_data['meta']['date']}, "
            f"store at {commit}) and in this run. Higher is better.",
            "",
            *table(["figure", "before", "after"], rows),
        ]
    )
