"""From recorded store calls to model operations: what each call means to each model.

The recorder keeps store calls as they were made (method, arguments, result);
which model operation a call is depends on the pattern the test runs (a claim
of pending rows is a ``claim``, the stale-claim pass's claim a ``reclaim``, an
update guarded on ``claimedBy`` a ``complete``). Each function here reads one
pattern and returns the operations for one model, plus the *problems* that no
order could excuse and that need no search (a claim returning more rows than
its limit, a keyed retry returning another batch). A call of the pattern's
table that a function does not understand is an error, never silently skipped;
filtered queries are reads no model needs and are left out.

Calls sharing an idempotency key are one logical operation (``merge_keyed``):
the key promises one effect, somewhere between the first attempt's invocation
and the first attempt that returned; every attempt that returned must have
returned the same result.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from tests.support.linearizability.history import UNKNOWN, Call, Operation, freeze


@dataclass
class Translated:
    """Model operations, and problems found without a search."""

    operations: list[Operation] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, call: Call, name: str, key: Hashable, arguments: Hashable, output: Any) -> None:
        self.operations.append(
            Operation(
                process=f"{call.process}#{call.seq}",
                name=name,
                key=key,
                input=arguments,
                output=output if call.ok else UNKNOWN,
                invoked=call.invoked,
                returned=call.returned if call.ok else None,
            )
        )


def _without_replay_flag(result: Any) -> Any:
    if isinstance(result, dict):
        return {name: value for name, value in result.items() if name != "replayed"}
    return result


def merge_keyed(calls: Iterable[Call]) -> tuple[list[Call], list[str]]:
    """One call per idempotency key: first invocation to first return, with that result."""
    merged: list[Call] = []
    by_key: dict[str, list[Call]] = {}
    for call in calls:
        if call.status == "failed":
            continue  # raised before any I/O: no effect to account for
        key = call.args.get("idempotency_key")
        if key is None:
            merged.append(call)
        else:
            by_key.setdefault(key, []).append(call)
    problems: list[str] = []
    for key, attempts in by_key.items():
        returned = [attempt for attempt in attempts if attempt.ok]
        results = {repr(_without_replay_flag(attempt.result)) for attempt in returned}
        if len(results) > 1:
            problems.append(f"idempotency key {key!r} returned {len(results)} different results")
        if len({repr(attempt.args) for attempt in attempts}) > 1:
            # Which attempt's arguments took effect is then unknown: record retries that
            # repeat the call exactly, as a retried task does.
            problems.append(f"idempotency key {key!r} was used with different arguments")
        first = min(attempts, key=lambda attempt: attempt.invoked)
        if returned:
            done = min(returned, key=lambda attempt: attempt.returned or 0)
            first = replace(
                first, returned=done.returned, status="ok", result=done.result, error=None
            )
        merged.append(first)
    merged.sort(key=lambda call: (call.invoked, call.process, call.seq))
    return merged, problems


def _conditions(call: Call) -> dict[str, tuple[str, Any]]:
    """``where`` as ``{field: (operator, value)}`` (the patterns here use each field once)."""
    where = call.args.get("where") or []
    return {
        condition["field"]: (condition.get("operator", condition.get("op")), condition["value"])
        for condition in where
    }


def _sets(call: Call) -> dict[str, Any]:
    return {
        mutation["field"]: mutation["value"]
        for mutation in call.args.get("mutations") or []
        if mutation.get("operation", mutation.get("op")) == "set"
    }


def _increments(call: Call) -> dict[str, Any]:
    return {
        mutation["field"]: mutation["value"]
        for mutation in call.args.get("mutations") or []
        if mutation.get("operation", mutation.get("op")) == "increment"
    }


def _field(result: Any, name: str) -> Any:
    """``result["value"][name]``, or None when the update found no row (or never returned)."""
    value = result and result.get("value")
    return value.get(name) if value else None


def _unexpected(call: Call) -> ValueError:
    return ValueError(f"no operation of this pattern: {call.method}({call.args})")


def _of(calls: Iterable[Call], table: str) -> tuple[list[Call], list[str]]:
    return merge_keyed(call for call in calls if call.args.get("table") == table)


# -- counters: increments of one numeric field ---------------------------------------------------


def counter(calls: Iterable[Call], table: str, field_name: str = "n") -> Translated:
    """Increments (``add``), guarded decrements (``add_if_above``), puts and gets of one field."""
    mine, problems = _of(calls, table)
    out = Translated(problems=problems)
    for call in mine:
        key, result = call.args.get("key"), call.result
        if call.method == "atomic_update" and field_name in _increments(call):
            delta = _increments(call)[field_name]
            guard = _conditions(call)
            if not guard:
                out.add(call, "add", key, delta, _field(result, field_name))
                continue
            operator, bound = guard[field_name]
            if set(guard) != {field_name} or operator != "gt":
                raise _unexpected(call)
            output = result and (result["updated"], _field(result, field_name))
            out.add(call, "add_if_above", key, (delta, bound), output)
        elif call.method == "put":
            out.add(call, "write", key, call.args["value"][field_name], None)
        elif call.method == "get":
            out.add(call, "read", key, None, result[field_name] if result else None)
        elif call.method != "query":
            raise _unexpected(call)
    return out


# -- compare-and-set registers: updates guarded on the field they set ------------------------------


def cas_register(calls: Iterable[Call], table: str, field_name: str = "v") -> Translated:
    """``where field equals x`` + ``set field y`` is ``cas(x, y)``; puts write, gets read."""
    mine, problems = _of(calls, table)
    out = Translated(problems=problems)
    for call in mine:
        key, result = call.args.get("key"), call.result
        if call.method == "atomic_update":
            operator, expected = _conditions(call)[field_name]
            if operator not in ("equals", "eq") or set(_sets(call)) != {field_name}:
                raise _unexpected(call)
            arguments = (freeze(expected), freeze(_sets(call)[field_name]))
            out.add(call, "cas", key, arguments, result and result["updated"])
        elif call.method == "put":
            out.add(call, "write", key, freeze(call.args["value"][field_name]), None)
        elif call.method == "get":
            out.add(call, "read", key, None, freeze(result[field_name]) if result else None)
        elif call.method != "query":
            raise _unexpected(call)
    return out


# -- upsert-once registers ---------------------------------------------------------------------------


def upsert_once(calls: Iterable[Call], table: str) -> Translated:
    """A seed-if-missing upsert is ``seed`` (inserted, value); one with mutations ``upsert``."""
    mine, problems = _of(calls, table)
    out = Translated(problems=problems)
    for call in mine:
        key, result = call.args.get("key"), call.result
        if call.method != "atomic_upsert":
            if call.method in ("get", "query"):
                continue  # reads of a row an upsert may have changed: not modelled
            raise _unexpected(call)
        seeded = freeze(call.args["insert_value"])
        if call.args.get("mutations"):
            out.add(call, "upsert", key, seeded, result and result["inserted"])
        else:
            output = result and (result["inserted"], freeze(result["value"]))
            out.add(call, "seed", key, seeded, output)
    return out


# -- leases: the leader-lease recipe's calls ---------------------------------------------------------


def lease(calls: Iterable[Call], table: str) -> Translated:
    """Seed (acquire a new lease), take over when expired, renew or release (holder-guarded)."""
    mine, problems = _of(calls, table)
    out = Translated(problems=problems)
    for call in mine:
        key, result = call.args.get("key"), call.result
        if call.method == "atomic_upsert" and not call.args.get("mutations"):
            value = call.args["insert_value"]
            out.add(
                call,
                "seed",
                key,
                (value["holder"], value["expiresAt"]),
                result and result["inserted"],
            )
            continue
        if call.method != "atomic_update":
            if call.method in ("get", "query"):
                continue
            raise _unexpected(call)
        guard, sets = _conditions(call), _sets(call)
        updated = result and result["updated"]
        if set(guard) == {"expiresAt"} and guard["expiresAt"][0] == "lte":
            arguments = (sets["holder"], guard["expiresAt"][1], sets["expiresAt"])
            out.add(call, "take_over", key, arguments, updated)
        elif set(guard) == {"holder"} and set(sets) == {"expiresAt"}:
            out.add(call, "renew", key, (guard["holder"][1], sets["expiresAt"]), updated)
        else:
            raise _unexpected(call)
    return out


# -- claimable queues ----------------------------------------------------------------------------------

Classify = Callable[[Call], str]


def claim_kind(call: Call) -> str:
    """``claim`` for a claim of pending rows, ``reclaim`` for the stale-claim pass (a claim of
    rows ``in_flight``)."""
    status = _conditions(call).get("status", (None, None))[1]
    return "reclaim" if status == "in_flight" else "claim"


def _claimer(call: Call) -> str:
    """Who a claim marks its rows with: its execution id, its ``claimedBy`` mutation, or itself."""
    named = call.args.get("execution_id") or _sets(call).get("claimedBy")
    return str(named) if named else f"{call.process}#{call.seq}"


def _row_state(value: dict[str, Any] | None) -> Hashable:
    if value is None:
        return ("absent",)
    status = value.get("status")
    if status == "pending":
        return ("pending",)
    if status == "done":
        return ("done", value.get("completedBy"))
    return ("held", value.get("claimedBy"))


#: Calls that declare, list or drop claimable sets: they change no row.
SET_CALLS = ("ensure_claim_index", "claim_sets", "drop_claim_set")


def queue(
    calls: Iterable[Call],
    table: str,
    classify: Classify = claim_kind,
    pending: Iterable[str] = (),
) -> Translated:
    """Per-row operations of a claimable queue (models.QUEUE_ROW).

    A claim is split into one operation per row it returned; a claim of unknown
    outcome may have taken any row, so it becomes one unknown operation on
    every row of the table. Each returned batch is checked against the claim's
    limit, and for a row returned twice. ``pending`` rows were enqueued before
    the history began (written by calls nobody recorded).
    """
    mine, problems = _of(calls, table)
    out = Translated(problems=problems)
    rows: set[str] = set(pending)
    for row in sorted(rows):
        out.operations.append(Operation("before", "enqueue", row, None, None, -2, -1))
    for call in mine:
        if call.method == "put":
            rows.add(call.args["key"])
        if call.method == "atomic_claim" and call.ok:
            rows.update(row["key"] for row in call.result["claimed"])
    for call in mine:
        key, result = call.args.get("key"), call.result
        if call.method == "atomic_claim":
            kind, claimer = classify(call), _claimer(call)
            if not call.ok:
                for row in sorted(rows):
                    out.add(call, kind, row, claimer, None)
                continue
            keys = [row["key"] for row in result["claimed"]]
            if len(keys) > call.args.get("limit", 10) or len(set(keys)) != len(keys):
                problems.append(f"claim {call.process}#{call.seq} returned {keys}")
            for row in keys:
                out.add(call, kind, row, claimer, True)
        elif call.method == "put":
            if call.args["value"].get("status") != "pending":
                raise _unexpected(call)
            out.add(call, "enqueue", key, None, None)
        elif call.method == "atomic_update":
            guard, sets = _conditions(call), _sets(call)
            if guard.get("status") != ("equals", "in_flight") or "claimedBy" not in guard:
                raise _unexpected(call)
            name = {"done": "complete", "pending": "release"}[sets["status"]]
            out.add(call, name, key, guard["claimedBy"][1], result and result["updated"])
        elif call.method == "get":
            out.add(call, "read", key, None, result and _row_state(result))
        elif call.method == "query" and not call.args.get("where") and call.ok:
            for row in result:  # a full listing: one read per row it shows
                out.add(call, "read", row["key"], None, _row_state(row["value"]))
        elif call.method != "query" and call.method not in SET_CALLS:
            raise _unexpected(call)
    return out
