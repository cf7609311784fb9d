"""What must hold at the end, read from the store with the project's own Python API.

Each check raises ``CheckFailed`` with a message that says what was expected and
what was found, and returns the numbers the summary prints.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from airflow_atomic_store import AtomicStore

__all__ = [
    "CheckFailed",
    "claim_retry_replayed_its_batch",
    "every_claim_accounted_for",
    "every_item_done_with_one_effect",
    "lease_intervals_never_overlap",
    "read_table",
]

READ_LIMIT = 1000  # the store's largest query
_ISO = re.compile(
    r"^(?P<base>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<fraction>\d+))?(?P<offset>Z|[+-]\d\d:\d\d)?$"
)


class CheckFailed(AssertionError):
    """An end-to-end guarantee did not hold."""


def read_table(store: AtomicStore, table: str) -> dict[str, dict[str, Any]]:
    """Every row of a logical table, ``{key: value}`` (at most ``READ_LIMIT - 1`` rows)."""
    page = store.query(table, limit=READ_LIMIT)
    if len(page) >= READ_LIMIT:
        raise CheckFailed(f"table {table!r} holds {READ_LIMIT} rows or more; the e2e reads fewer")
    return {row["key"]: row["value"] for row in page}


def status_counts(rows: dict[str, dict[str, Any]]) -> Counter[str]:
    return Counter(str(value.get("status")) for value in rows.values())


def every_item_done_with_one_effect(
    items: dict[str, dict[str, Any]], effects: dict[str, dict[str, Any]], *, expected: int
) -> None:
    """``expected`` items, every one ``done``; exactly one side-effect record per item."""
    if len(items) != expected:
        raise CheckFailed(f"expected {expected} items in the queue, found {len(items)}")
    statuses = status_counts(items)
    if statuses != Counter({"done": expected}):
        stuck = sorted(k for k, v in items.items() if v.get("status") != "done")[:10]
        raise CheckFailed(f"expected every item done, found {dict(statuses)}; e.g. {stuck}")
    missing = sorted(set(items) - set(effects))
    unknown = sorted(set(effects) - set(items))
    if missing or unknown:
        raise CheckFailed(
            f"side effects are not one per item: {len(missing)} item(s) without one "
            f"(e.g. {missing[:5]}), {len(unknown)} for no item (e.g. {unknown[:5]})"
        )
    anonymous = sorted(k for k, v in effects.items() if not v.get("performedBy"))
    if anonymous:
        raise CheckFailed(f"side effects that no run performed: {anonymous[:5]}")


def every_claim_accounted_for(
    items: dict[str, dict[str, Any]], claims: dict[str, list[str]], tasks: Counter[str]
) -> int:
    """The claims never handed a row out twice, except to the recovery DAG.

    ``claims`` maps each run to the keys its claim returned; ``tasks`` counts the
    mapped ``process`` task instances per run. A row is claimed once by a
    dispatcher, and once more each time a recovery run re-claims it (which
    increments its ``recoveries``), so across all runs each key must appear
    exactly ``1 + recoveries`` times; and every claimed row got its own mapped
    task. Returns the number of claims.
    """
    claimed = Counter(key for keys in claims.values() for key in keys)
    wrong = {
        key: (claimed[key], 1 + int(value.get("recoveries") or 0))
        for key, value in items.items()
        if claimed[key] != 1 + int(value.get("recoveries") or 0)
    }
    if wrong:
        sample = dict(sorted(wrong.items())[:5])
        raise CheckFailed(
            f"{len(wrong)} item(s) claimed a different number of times than 1 + recoveries "
            f"(claimed, expected): {sample}"
        )
    unmapped = {
        run: (tasks[run], len(keys)) for run, keys in claims.items() if tasks[run] != len(keys)
    }
    if unmapped:
        raise CheckFailed(f"runs whose process tasks do not match their claims: {unmapped}")
    return sum(claimed.values())


def claim_retry_replayed_its_batch(
    first_keys: list[str],
    result: Any,
    rows: dict[str, dict[str, Any]],
    claimed_by: str,
) -> None:
    """A claim retried after its first try committed got that batch back and nothing more.

    ``first_keys`` are the rows the first try claimed, in claim order (read from the
    store before it was killed); ``result`` is the retry's ``return_value`` XCom;
    ``rows`` the queue afterwards. The retry must report ``replayed: true`` with the
    same keys in the same order; the run holds no other row; every row of the batch
    was processed (``done``) and never re-claimed by a stale-claim pass (no
    ``recoveries``); every other row is still ``pending``.
    """
    if not first_keys:
        raise CheckFailed("the first try claimed nothing: there is no batch to replay")
    if not isinstance(result, dict):
        raise CheckFailed(f"the retried claim returned no result: {result!r}")
    if result.get("replayed") is not True:
        raise CheckFailed(
            f"the retried claim was not replayed: replayed={result.get('replayed')!r}"
        )
    keys = [row.get("key") for row in result.get("claimed") or ()]
    if keys != first_keys or result.get("count") != len(first_keys):
        raise CheckFailed(
            f"the retry got {keys} (count {result.get('count')!r}), "
            f"the first try claimed {first_keys}"
        )
    held = sorted(key for key, value in rows.items() if value.get("claimedBy") == claimed_by)
    if held != sorted(first_keys):
        raise CheckFailed(f"{claimed_by} holds {held}; the first try claimed {sorted(first_keys)}")
    batch = {key: rows.get(key, {}) for key in first_keys}
    unfinished = {k: v.get("status") for k, v in batch.items() if v.get("status") != "done"}
    if unfinished:
        raise CheckFailed(f"rows of the replayed batch were not processed: {unfinished}")
    recovered = sorted(k for k, v in batch.items() if v.get("recoveries"))
    if recovered:
        raise CheckFailed(f"a stale-claim pass re-claimed rows of the batch: {recovered}")
    others = {
        k: v.get("status")
        for k, v in rows.items()
        if k not in first_keys and v.get("status") != "pending"
    }
    if others:
        raise CheckFailed(f"rows outside the batch were touched: {others}")


def parse_time(text: str) -> datetime:
    """An ISO 8601 timestamp as the REST API writes it (``Z`` or an offset, any fraction)."""
    match = _ISO.match(text)
    if match is None:
        raise ValueError(f"not an ISO 8601 timestamp: {text!r}")
    fraction = (match["fraction"] or "")[:6].ljust(6, "0")
    offset = "+00:00" if match["offset"] in ("Z", None) else match["offset"]
    return datetime.fromisoformat(f"{match['base']}.{fraction}{offset}")


def most_at_once(intervals: list[tuple[str, str]]) -> int:
    """The largest number of ``(start, end)`` intervals (ISO timestamps) open at one instant."""
    events = sorted(
        [(parse_time(start), 1) for start, _ in intervals]
        + [(parse_time(end), -1) for _, end in intervals],
        key=lambda event: (event[0], event[1]),  # an end before a start at the same instant
    )
    most = current = 0
    for _, change in events:
        current += change
        most = max(most, current)
    return most


def lease_intervals_never_overlap(intervals: Iterable[tuple[str, Any, Any]]) -> int:
    """``(holder, start, end)`` canonical timestamps: no two intervals overlap; returns the count.

    Canonical UTC timestamps compare correctly as strings. An interval that ends
    exactly when the next starts does not overlap it.
    """
    ordered: list[tuple[str, str, str]] = []
    for holder, start, end in intervals:
        if not isinstance(start, str) or not isinstance(end, str):
            raise CheckFailed(f"lease interval of {holder} is incomplete: {start!r} to {end!r}")
        ordered.append((holder, start, end))
    ordered.sort(key=lambda interval: (interval[1], interval[2]))
    if not ordered:
        raise CheckFailed("the lease log is empty: no run ever held the lease")
    for holder, start, end in ordered:
        if not start <= end:
            raise CheckFailed(f"lease interval of {holder} ends before it starts: {start} > {end}")
    for (first, _, first_end), (second, second_start, _) in itertools.pairwise(ordered):
        if second_start < first_end:
            raise CheckFailed(
                f"lease held twice at once: {first} until {first_end}, {second} from {second_start}"
            )
    return len(ordered)
