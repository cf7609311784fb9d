"""What each command asks the store, and what it prints: a registry, name → handler.

A handler returns an :class:`Outcome`: the JSON document (``--json``), the
human-readable lines, and the exit code. Non-zero codes other than 1 belong
to ``main`` (2 usage, 3 store); 1 means "the command found what it looks
for": stale claims.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_atomic_store.cli import render
from airflow_atomic_store.inspection import InFlightRow, InspectedRow, StoreInspector
from airflow_atomic_store.store import AtomicStore

OK, FOUND, USAGE, UNREACHABLE = 0, 1, 2, 3


@dataclass(frozen=True)
class Outcome:
    data: dict[str, Any]
    lines: list[str]
    code: int = OK


Handler = Callable[[AtomicStore, argparse.Namespace], Outcome]


def tables(store: AtomicStore, args: argparse.Namespace) -> Outcome:
    found = StoreInspector(store).tables()
    data = {"tables": [summary.to_dict() for summary in found]}
    if not found:
        return Outcome(data, ["(no tables)"])
    return Outcome(data, render.table(["TABLE", "ROWS"], [(t.table, t.rows) for t in found]))


def stats(store: AtomicStore, args: argparse.Namespace) -> Outcome:
    result = StoreInspector(store).stats(
        args.table, stale_after=args.stale_after, in_flight_limit=args.in_flight_limit
    )
    pairs: list[tuple[str, Any]] = [
        ("table", result.table),
        ("rows", result.rows),
        ("oldest pending", result.oldest_pending_age),
        ("in flight", result.in_flight_count),
    ]
    if result.stale_after is not None:
        pairs.append((f"stale (> {render.duration(result.stale_after)})", result.stale_count))
    lines = render.fields(pairs)
    if result.status_counts:
        lines += ["", *render.table(["STATUS", "ROWS"], list(result.status_counts.items()))]
    if result.in_flight:
        lines += ["", *_claims(result.in_flight, stale_column=result.stale_after is not None)]
        hidden = result.in_flight_count - len(result.in_flight)
        if hidden > 0:
            lines.append(f"... and {hidden} more (--in-flight-limit)")
    found = bool(result.stale_count)
    return Outcome(result.to_dict(), lines, FOUND if found else OK)


def rows(store: AtomicStore, args: argparse.Namespace) -> Outcome:
    page = StoreInspector(store).rows(
        args.table, where=args.where, match=args.match, limit=args.limit, offset=args.offset
    )
    if not page.rows:
        lines = [f"(no rows at offset {page.offset})" if page.offset else "(no rows)"]
    else:
        lines = render.table(
            ["KEY", "CREATED AT", "UPDATED AT", "STATE", "VALUE"],
            [(r.key, r.created_at, r.updated_at, _state(r), r.value) for r in page.rows],
        )
        first, last = page.offset + 1, page.offset + len(page.rows)
        lines.append(f"row {first}" if first == last else f"rows {first} to {last}")
        if page.has_more:
            lines[-1] += f"; more with --offset {page.offset + len(page.rows)}"
    return Outcome(page.to_dict(), lines)


def stale(store: AtomicStore, args: argparse.Namespace) -> Outcome:
    found = StoreInspector(store).stale(args.table, older_than=args.older_than, limit=args.limit)
    data = {
        "table": args.table,
        "older_than_seconds": args.older_than.total_seconds(),
        "count": len(found),
        "rows": [row.to_dict() for row in found],
    }
    older = render.duration(args.older_than)
    if not found:
        return Outcome(data, [f"no claim older than {older}"])
    lines = [*_claims(found, stale_column=False), f"{len(found)} claim(s) older than {older}"]
    return Outcome(data, lines, FOUND)


def explain_claim(store: AtomicStore, args: argparse.Namespace) -> Outcome:
    plan = store.explain_claim(
        args.table,
        where=args.where,
        match=args.match,
        order_by=args.order_by,
        direction=args.direction,
        limit=args.limit,
        generic=args.generic,
    )
    return Outcome({"table": args.table, "plan": plan}, plan.splitlines())


def migrate(store: AtomicStore, args: argparse.Namespace) -> Outcome:
    done = store.migrate()
    before = done["version_before"]
    if before is None:
        lines = [f"created the store {done['storage_table']!r} at schema version {done['version']}"]
    elif done["applied"]:
        lines = [
            f"migrated {done['storage_table']!r} from schema version {before} to "
            f"{done['version']}: {', '.join(done['applied'])}"
        ]
    else:
        lines = [f"{done['storage_table']!r} is at schema version {done['version']}: nothing to do"]
    return Outcome(done, lines)


def _claims(claims: tuple[InFlightRow, ...], *, stale_column: bool) -> list[str]:
    headers = ["IN FLIGHT", "CLAIMED BY", "CLAIMED AT", "AGE"]
    values: list[list[Any]] = [[c.key, c.claimed_by, c.claimed_at, c.claim_age] for c in claims]
    if stale_column:
        headers.append("STALE")
        for row, claim in zip(values, claims, strict=True):
            row.append(claim.stale)
    return render.table(headers, values)


def _state(row: InspectedRow) -> str:
    if row.shape == "lease":
        return f"lease {row.lease_state}"
    if row.shape == "bucket":
        return f"bucket {row.tokens} tokens"
    return ""


HANDLERS: dict[str, Handler] = {
    "tables": tables,
    "stats": stats,
    "rows": rows,
    "stale": stale,
    "explain-claim": explain_claim,
    "migrate": migrate,
}
