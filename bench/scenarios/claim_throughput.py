"""Scenario 1: drain a queue with 1-8 claimer processes, against hand-written SQL and queues.

Every drain starts from the same freshly loaded, vacuumed table. The store
and the hand-written statement run back to back for each configuration (in
alternating order, so neither always runs on a warmer server). Without the
claim index a claim steps over every row already consumed, so slow drains are
cut at a time cap and their rate is over the rows claimed until then.
Every drain also checks that no row was returned twice.
"""

from __future__ import annotations

from typing import Any

from bench import loading, procrastinate_queue, readdelete_queue
from bench.drainers import run_drain, timed_processes
from bench.environment import BenchEnvironment
from bench.sizes import Sizes
from bench.timing import progress

TITLE = "Claim throughput"


def _load(url: str, pending: int, indexed: bool) -> None:
    total = pending + loading.history_for(pending)
    loading.load_queue(url, total, pending=pending, claim_index=indexed)


def _store_and_sql(url: str, sizes: Sizes) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    turn = 0
    for indexed in (False, True):
        for processes in sizes.drain_processes:
            for batch in sizes.drain_batches:
                entry: dict[str, Any] = {"index": indexed, "processes": processes, "batch": batch}
                order = ("store", "sql") if turn % 2 == 0 else ("sql", "store")
                turn += 1
                for kind in order:
                    _load(url, sizes.drain_rows, indexed)
                    entry.setdefault("plan", loading.claim_plan(url, batch))
                    # Unindexed means no set at all: the store must not declare one itself.
                    claimer = "store_unassisted" if kind == "store" else kind
                    entry[kind] = run_drain(claimer, url, batch, processes, sizes.drain_cap_seconds)
                rows.append(entry)
                progress(
                    f"claim index={indexed} p={processes} batch={batch}: "
                    f"store {entry['store']['rate']:,.0f} rows/s, "
                    f"sql {entry['sql']['rate']:,.0f} rows/s"
                )
    return rows


def _read_delete(url: str, sizes: Sizes) -> list[dict[str, Any]]:
    rows = []
    for processes in sizes.drain_processes:
        for batch in sizes.drain_batches:
            readdelete_queue.load(url, sizes.drain_rows)
            result = run_drain("readdelete", url, batch, processes, sizes.drain_cap_seconds)
            rows.append({"processes": processes, "batch": batch, **result})
            progress(f"read-delete p={processes} batch={batch}: {result['rate']:,.0f} rows/s")
    return rows


def _procrastinate(url: str, sizes: Sizes) -> list[dict[str, Any]]:
    rows = []
    for processes in sizes.drain_processes:
        entry: dict[str, Any] = {"processes": processes}
        for finish in (False, True):
            procrastinate_queue.prepare(url, sizes.drain_rows)
            args = (url, finish, sizes.drain_cap_seconds)
            result = timed_processes(
                procrastinate_queue.drain, args, processes, sizes.drain_cap_seconds
            )
            entry["fetch_finish" if finish else "fetch"] = result
        rows.append(entry)
        progress(
            f"procrastinate p={processes}: fetch {entry['fetch']['rate']:,.0f} jobs/s, "
            f"fetch+finish {entry['fetch_finish']['rate']:,.0f} jobs/s"
        )
    return rows


def _naive(url: str, sizes: Sizes) -> list[dict[str, Any]]:
    rows = []
    for processes in sizes.naive_processes:
        _load(url, sizes.naive_rows, True)
        result = run_drain("naive", url, 10, processes, 120.0)
        rows.append({"processes": processes, "batch": 10, "rows": sizes.naive_rows, **result})
        progress(f"naive p={processes}: {result['duplicates']} extra hand-outs")
    return rows


def run(env: BenchEnvironment, sizes: Sizes, *, require_extras: bool) -> dict[str, Any]:
    url = env.postgres_url()
    loading.create_schema(url)
    data: dict[str, Any] = {
        "rows": sizes.drain_rows,
        "history": loading.history_for(sizes.drain_rows),
        "cap_seconds": sizes.drain_cap_seconds,
        "store_vs_sql": _store_and_sql(url, sizes),
        "read_delete": _read_delete(env.postgres_url("readdelete"), sizes),
        "naive": _naive(url, sizes),
    }
    if procrastinate_queue.available():
        data["procrastinate_version"] = procrastinate_queue.version()
        data["procrastinate"] = _procrastinate(env.postgres_url("procrastinate"), sizes)
    elif require_extras:
        raise RuntimeError("procrastinate is missing: install the bench extra (make bench)")
    else:
        progress("procrastinate is not installed: skipped (smoke mode)")
    return data


# -- report ----------------------------------------------------------------------------


def _rate(result: dict[str, Any]) -> str:
    mark = " †" if result["capped"] else ""
    return f"{result['rate']:,.0f}{mark}"


def section(data: dict[str, Any]) -> str:
    from bench.report_format import table

    lines = [
        f"Drain {data['rows']:,} pending rows (under {data['history']:,} older done rows, a "
        "queue's history); rows/s over the whole drain (wall time from the "
        "moment every claimer is connected until the last one finds the queue empty). "
        f"† = cut at the {data['cap_seconds']:g} s cap: the rate is over the rows claimed "
        "until then (the start of the queue, the cheap part when unindexed). "
        "*Plan walks* is where PostgreSQL's plan for that batch size starts at the beginning "
        "of the drain (`explain_claim`).",
        "",
    ]
    for indexed in (False, True):
        heading = (
            'With the claimable set declared (`store.ensure_claim_index(table="jobs", '
            "where=[status equals pending])`; the hand-written claim writes the same literals)"
            if indexed
            else "Without the claim index (only the store's `(table_id, created_at, key)` index)"
        )
        body = [
            [
                str(r["processes"]),
                str(r["batch"]),
                _rate(r["store"]),
                _rate(r["sql"]),
                f"{r['store']['rate'] / r['sql']['rate']:.2f}x" if r["sql"]["rate"] else "-",
                str(r["store"]["duplicates"] + r["sql"]["duplicates"]),
                _index_used(r.get("plan", "")),
            ]
            for r in data["store_vs_sql"]
            if r["index"] == indexed
        ]
        lines += [f"**{heading}**", ""]
        lines += table(
            [
                "claimers",
                "batch",
                "store rows/s",
                "hand-written rows/s",
                "store ÷ SQL",
                "dup",
                "plan walks",
            ],
            body,
        )
        lines.append("")
    lines += _queue_tables(data)
    return "\n".join(lines)


def _index_used(plan: str) -> str:
    """Which access path the claim's plan starts from, in a few words."""
    if "_set_" in plan:
        return "claimable set"
    if "created_idx" in plan:
        return "created_at index"
    if "Seq Scan" in plan:
        return "whole table"
    return plan or "-"


def _queue_tables(data: dict[str, Any]) -> list[str]:
    from bench.report_format import table

    indexed = {(r["processes"], r["batch"]): r for r in data["store_vs_sql"] if r["index"]}
    lines = [
        "**Read-then-delete queue (pgmq-shaped: pgmq's table, `read` and `delete` statements, "
        "hand-written — the pgmq extension cannot be installed here) vs the store with the "
        "claim index**",
        "",
    ]
    body = []
    for r in data["read_delete"]:
        store = indexed.get((r["processes"], r["batch"]))
        store_rate = store["store"]["rate"] if store else float("nan")
        body.append(
            [
                str(r["processes"]),
                str(r["batch"]),
                _rate(r),
                f"{store_rate:,.0f}",
                f"{store_rate / r['rate']:.2f}x" if r["rate"] else "-",
            ]
        )
    lines += table(
        ["claimers", "batch", "read+delete rows/s", "store rows/s", "store ÷ queue"], body
    )
    lines.append("")
    if "procrastinate" in data:
        lines += [
            f"**procrastinate {data['procrastinate_version']}** (its own database on the same "
            "server; one job per fetch, so compared with the store's claim at batch 1 and 10, "
            "claim index on)",
            "",
        ]
        body = []
        for r in data["procrastinate"]:
            one = indexed.get((r["processes"], 1))
            ten = indexed.get((r["processes"], 10))
            fetch = r["fetch"]["rate"]
            body.append(
                [
                    str(r["processes"]),
                    _rate(r["fetch"]),
                    _rate(r["fetch_finish"]),
                    f"{one['store']['rate']:,.0f}" if one else "-",
                    f"{one['store']['rate'] / fetch:.2f}x" if one and fetch else "-",
                    f"{ten['store']['rate']:,.0f}" if ten else "-",
                ]
            )
        lines += table(
            [
                "workers",
                "fetch jobs/s",
                "fetch+finish jobs/s",
                "store batch 1 rows/s",
                "store b1 ÷ fetch",
                "store batch 10 rows/s",
            ],
            body,
        )
        lines.append("")
    lines += ["**Naive select-then-update claimer** (no lock between reading and marking)", ""]
    lines += table(
        ["claimers", "batch", "rows", "rows handed out", "handed out again (double claims)"],
        [
            [
                str(r["processes"]),
                str(r["batch"]),
                f"{r['rows']:,}",
                f"{r['claimed']:,}",
                f"{r['duplicates']:,}",
            ]
            for r in data["naive"]
        ],
    )
    lines += ["", "The atomic claim handed out no row twice in any drain above (`dup` column)."]
    return lines
