"""The issue's targets, checked against one run's data (reported, never asserted).

Each check returns ``(target, measured, met)``; a check whose scenario did
not run (a single-scenario run, or procrastinate missing in smoke mode) is
left out rather than guessed.
"""

from __future__ import annotations

from typing import Any

Check = tuple[str, str, bool]


def _claim_vs_sql(claim: dict[str, Any]) -> list[Check]:
    checks = []
    for indexed in (False, True):
        entries = [e for e in claim["store_vs_sql"] if e["index"] == indexed and e["sql"]["rate"]]
        if not entries:
            continue
        worst = min(entries, key=lambda e: e["store"]["rate"] / e["sql"]["rate"])
        ratio = worst["store"]["rate"] / worst["sql"]["rate"]
        where = f"{worst['processes']} claimers, batch {worst['batch']}"
        checks.append(
            (
                f"claim ≥ 0.9x hand-written at every concurrency, "
                f"{'with' if indexed else 'without'} the claim index",
                f"lowest {ratio:.2f}x ({where})",
                ratio >= 0.9,
            )
        )
    return checks


def _claim_vs_read_delete(claim: dict[str, Any]) -> list[Check]:
    indexed = [e["store"]["rate"] for e in claim["store_vs_sql"] if e["index"]]
    queue = [e["rate"] for e in claim["read_delete"]]
    if not indexed or not queue:
        return []
    best, best_queue = max(indexed), max(queue)
    return [
        (
            "with the claim index, ≥ 2x the best rate of a read-then-delete queue",
            f"{best:,.0f} vs {best_queue:,.0f} rows/s = {best / best_queue:.2f}x",
            best >= 2 * best_queue,
        )
    ]


def _claim_vs_procrastinate(claim: dict[str, Any]) -> list[Check]:
    if "procrastinate" not in claim:
        return []
    store = {
        e["processes"]: e["store"]["rate"]
        for e in claim["store_vs_sql"]
        if e["index"] and e["batch"] == 1
    }
    pairs = [
        (r["processes"], store[r["processes"]], r["fetch"]["rate"])
        for r in claim["procrastinate"]
        if r["processes"] in store
    ]
    if not pairs:
        return []
    worst = min(pairs, key=lambda p: p[1] / p[2])
    return [
        (
            "ahead of procrastinate's per-job fetch rate at equal concurrency (store batch 1)",
            f"lowest {worst[1] / worst[2]:.2f}x ({worst[0]} workers)",
            all(s > f for _, s, f in pairs),
        )
    ]


def _latency(latency: dict[str, Any]) -> list[Check]:
    worst = max(latency["operations"], key=lambda e: e["store"]["p50_ms"] / e["sql"]["p50_ms"])
    ratio = worst["store"]["p50_ms"] / worst["sql"]["p50_ms"]
    return [
        (
            "single-op overhead ≤ 1.25x the hand-written statement (p50)",
            f"highest {ratio:.2f}x ({worst['operation']})",
            ratio <= 1.25,
        )
    ]


def _scale(scale: dict[str, Any]) -> list[Check]:
    sizes = scale["sizes"]
    if len(sizes) < 2:
        return []
    small, large = sizes[0], sizes[-1]
    ratio = large["store_index_ms"] / small["store_index_ms"]
    return [
        (
            f"claim from {large['rows']:,} rows within 2x of {small['rows']:,} rows (claim index)",
            f"{large['store_index_ms']:.2f} vs {small['store_index_ms']:.2f} ms = {ratio:.2f}x",
            ratio <= 2.0,
        )
    ]


def _aged(aged: dict[str, Any]) -> list[Check]:
    """Issue 10's targets; the drain targets need the 4-claimer, batch-10 configuration."""
    from bench.scenarios.aged_queue import (
        drains_in,
        sqlite_rate,
        target_median,
        target_samples,
    )

    checks = []
    samples = [s for s in target_samples(aged) if s["pgmq"]["rate"]]
    if samples:
        queue = target_median(samples, "pgmq")
        over = f"median of {len(samples)} drains: " if len(samples) > 1 else ""
        measured = drains_in(samples)
        for name, label, bar in (
            ("recipe", "the recipe's claim with nothing prepared", 1.0),
            ("grown", "the recipe's claim, history grown under it", 1.0),
            ("declared", "the store with a declared set", 1.5),
            ("delete", "delete-mode drain", 1.0),
        ):
            if name not in measured:
                continue
            rate = target_median(samples, name)
            checks.append(
                (
                    f"aged queue, 4 claimers, batch 10: {label} ≥ {bar:.1f}x pgmq-shaped read+delete",
                    f"{over}{rate:,.0f} vs {queue:,.0f} rows/s = {rate / queue:.2f}x",
                    rate / queue >= bar,
                )
            )
    lat = aged["latency"]
    ratio = lat["claim"]["p50_ms"] / lat["update"]["p50_ms"]
    checks.append(
        (
            "aged queue: limit-1 claim p50 ≤ 1.25x a guarded single-row update's p50",
            f"{lat['claim']['p50_ms']:.3f} vs {lat['update']['p50_ms']:.3f} ms = {ratio:.2f}x",
            ratio <= 1.25,
        )
    )
    curve = [e for e in aged["history_curve"] if not e["again"]]
    if len(curve) >= 2:
        small, large = curve[0], curve[-1]
        ratio = large["p50_ms"] / small["p50_ms"]
        checks.append(
            (
                f"claim of 10 with {large['history']:,} done rows within 1.5x of "
                f"{small['history']:,} (default path)",
                f"{large['p50_ms']:.3f} vs {small['p50_ms']:.3f} ms = {ratio:.2f}x",
                ratio <= 1.5,
            )
        )
    hand = sqlite_rate(aged, "sql")
    for variant, label in (("recipe", "recipe"), ("grown", "recipe, history grown under it")):
        if variant not in aged["sqlite"]["drains"]:
            continue
        store = sqlite_rate(aged, variant)
        checks.append(
            (
                f"SQLite aged-queue drain ({label}) ≥ 0.9x the hand-written partial-index "
                "statement",
                f"{store:,.0f} vs {hand:,.0f} rows/s = {store / hand:.2f}x",
                store >= 0.9 * hand,
            )
        )
    return checks


def _idempotency(idempotency: dict[str, Any]) -> list[Check]:
    return [
        (
            f"{e['operation']} with an idempotency key ≤ 1.3x the same call without one (p50)",
            f"{e['keyed']['p50_ms']:.3f} vs {e['plain']['p50_ms']:.3f} ms = "
            f"{e['keyed']['p50_ms'] / e['plain']['p50_ms']:.2f}x",
            e["keyed"]["p50_ms"] <= 1.3 * e["plain"]["p50_ms"],
        )
        for e in idempotency["operations"]
    ]


def check(data: dict[str, Any]) -> list[Check]:
    checks: list[Check] = []
    if "claim" in data:
        claim = data["claim"]
        checks += _claim_vs_sql(claim) + _claim_vs_read_delete(claim)
        checks += _claim_vs_procrastinate(claim)
    if "latency" in data:
        checks += _latency(data["latency"])
    if "scale" in data:
        checks += _scale(data["scale"])
    if "aged" in data:
        checks += _aged(data["aged"])
    if "idempotency" in data:
        checks += _idempotency(data["idempotency"])
    if "soak" in data:
        from bench.scenarios.storage_soak import target_checks

        checks += target_checks(data["soak"])
    if "lifecycle" in data:
        from bench.scenarios.lifecycle import target_checks as lifecycle_checks

        checks += lifecycle_checks(data["lifecycle"])
    if "enqueue" in data:
        from bench.scenarios.enqueue import target_checks as enqueue_checks

        checks += enqueue_checks(data["enqueue"])
    if "delete" in data:
        from bench.scenarios.delete_drain import target_check as delete_check

        checks.append(delete_check(data["delete"]))
    if "deployed" in data:
        from bench.scenarios.airflow_deployed import target_check as deployed_check

        checks.append(deployed_check(data["deployed"]))
    return checks
