"""Recording store calls and reading them back as model operations (no database).

A fake store stands in for ``AtomicStore`` here: what is under test is the
recorder's file format and the translations, not the store (the store's own
histories are recorded in the reliability tier, beside injected bugs in
tests/reliability/test_linearizability_injected_bugs.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_atomic_store import SpecError, StoreUnavailableError
from tests.support.linearizability import (
    COUNTER,
    QUEUE_ROW,
    UNKNOWN,
    Recorder,
    RecordingStore,
    check_calls,
    read_calls,
    translate,
)

PENDING = [{"field": "status", "operator": "equals", "value": "pending"}]
INCREMENT = [{"field": "n", "operation": "increment", "value": 1}]


class FakeStore:
    """Answers like a store whose counter stands at ``n``; fails when told to."""

    def __init__(self) -> None:
        self.n = 0
        self.fail: BaseException | None = None

    def atomic_update(self, table: str, key: str, **options: Any) -> dict[str, Any]:
        if self.fail is not None:
            raise self.fail
        self.n += 1
        return {"updated": True, "value": {"n": self.n}, "key": key}

    def get(self, table: str, key: str) -> dict[str, Any]:
        return {"n": self.n}

    def close(self) -> None:
        pass


def test_every_call_is_recorded_with_its_arguments_result_and_times(tmp_path: Path) -> None:
    with Recorder(tmp_path, "p1") as recorder:
        store: Any = RecordingStore(FakeStore(), recorder)  # type: ignore[arg-type]
        store.atomic_update("counters", "n", mutations=INCREMENT)
        store.get("counters", "n")
    first, second = read_calls([tmp_path / "p1.jsonl"])
    assert (first.method, first.args["table"], first.args["key"]) == (
        "atomic_update",
        "counters",
        "n",
    )
    assert first.args["mutations"] == INCREMENT and first.ok
    assert first.result == {"updated": True, "value": {"n": 1}, "key": "n"}
    assert first.returned is not None and first.invoked <= first.returned <= second.invoked
    assert second.result == {"n": 1}


def test_an_error_leaves_the_outcome_unknown_unless_it_proves_nothing_was_written(
    tmp_path: Path,
) -> None:
    fake = FakeStore()
    with Recorder(tmp_path, "p1") as recorder:
        store: Any = RecordingStore(fake, recorder)  # type: ignore[arg-type]
        fake.fail = StoreUnavailableError("connection lost")
        with pytest.raises(StoreUnavailableError):
            store.atomic_update("counters", "n", mutations=INCREMENT)
        fake.fail = SpecError("mutations", "bad")
        with pytest.raises(SpecError):
            store.atomic_update("counters", "n", mutations=INCREMENT)
    lost, refused = read_calls([tmp_path / "p1.jsonl"])
    assert (lost.status, lost.returned) == ("unknown", None)
    assert "connection lost" in (lost.error or "")
    assert refused.status == "failed"
    operations = translate.counter([lost, refused], table="counters").operations
    assert [op.output for op in operations] == [UNKNOWN], "a refused call had no effect"


def test_a_process_killed_mid_call_or_mid_line_leaves_an_unknown_call(tmp_path: Path) -> None:
    with Recorder(tmp_path, "victim") as recorder:
        for n in (1, 2):
            with recorder.call("atomic_update", table="counters", key="n") as call:
                call.returned({"updated": True, "value": {"n": n}, "key": "n"})
    path = tmp_path / "victim.jsonl"
    invoke_1, ok_1, invoke_2, ok_2 = path.read_text().splitlines(keepends=True)
    # Killed after the second invocation line, in the middle of writing its completion.
    path.write_text(invoke_1 + ok_1 + invoke_2 + ok_2[:20])
    done, killed = read_calls([path])
    assert done.ok and killed.status == "unknown" and killed.returned is None


def _call(process: str, seq: int, method: str, args: dict[str, Any], result: Any, at: int) -> Any:
    from tests.support.linearizability import Call

    return Call(process, seq, method, args, at, at + 1, "ok", result)


def test_keyed_attempts_are_one_operation_and_must_return_the_same_result() -> None:
    keyed = {"table": "counters", "key": "n", "mutations": INCREMENT, "idempotency_key": "k"}
    lost = _call("p", 1, "atomic_update", keyed, None, 0)
    lost = type(lost)(lost.process, 1, lost.method, keyed, 0)  # unknown: no completion
    replay = _call("p", 2, "atomic_update", keyed, {"updated": True, "value": {"n": 1}}, 5)
    again = _call("p", 3, "atomic_update", keyed, {"updated": True, "value": {"n": 1}}, 7)
    translated = translate.counter([lost, replay, again], table="counters")
    (op,) = translated.operations
    assert (op.invoked, op.returned, op.output) == (0, 6, 1) and not translated.problems
    other = _call("p", 4, "atomic_update", keyed, {"updated": True, "value": {"n": 2}}, 9)
    problems = translate.counter([replay, other], table="counters").problems
    assert problems == ["idempotency key 'k' returned 2 different results"]
    twice = {**keyed, "mutations": [{"field": "n", "operation": "increment", "value": 2}]}
    changed = _call("p", 5, "atomic_update", twice, {"updated": True, "value": {"n": 1}}, 9)
    problems = translate.counter([replay, changed], table="counters").problems
    assert problems == ["idempotency key 'k' was used with different arguments"]


def test_a_claim_beyond_its_limit_or_repeating_a_row_is_a_problem_without_search() -> None:
    claim = {"table": "jobs", "where": PENDING, "limit": 1, "execution_id": "a"}
    rows = [{"key": "x", "value": {}}, {"key": "x", "value": {}}]
    over = _call("a", 1, "atomic_claim", claim, {"claimed": rows, "count": 2}, 0)
    checked = check_calls([over], QUEUE_ROW, lambda calls: translate.queue(calls, table="jobs"))
    assert not checked.ok and checked.problems == ("claim a#1 returned ['x', 'x']",)


def test_a_call_the_pattern_does_not_know_is_an_error_never_skipped() -> None:
    odd = _call("a", 1, "delete", {"table": "counters", "key": "n"}, True, 0)
    with pytest.raises(ValueError, match="no operation of this pattern"):
        translate.counter([odd], table="counters")
    assert check_calls([], COUNTER, lambda calls: translate.counter(calls, table="x")).ok
