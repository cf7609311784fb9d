"""A linearizability checker for the store's histories (a test utility; see docs/guarantees.md).

Record (``recorder``), translate the recorded store calls into model
operations (``translate``), search (``search.check``) against a sequential
model (``models``). ``check_recorded`` does all three for a directory of
history files and returns the verdict with the problems found on the way.

Hooking a scenario in (each worker process, then the test)::

    with Recorder(history_dir, f"w{n}") as recorder:      # one file per process
        store = RecordingStore(AtomicStore(url), recorder)  # every call recorded
        store.atomic_update("counters", "total", mutations=[...], idempotency_key=k)
        # or, around any other call:
        with recorder.call("atomic_claim", table="queue", where=PENDING, limit=2,
                           execution_id=k, idempotency_key=k) as call:
            call.returned(store.atomic_claim(...))

    checked = check_recorded(history_dir, COUNTER, partial(translate.counter, table="counters"))
    assert checked.ok, checked.describe()

Record the call's real arguments (``mutations``, ``where``, ``execution_id``):
the translations read them to know which model operation a call is. A retry
repeats the call with the same idempotency key and arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from tests.support.linearizability import translate
from tests.support.linearizability.history import UNKNOWN, Call, Operation, read_calls
from tests.support.linearizability.models import (
    CAS_REGISTER,
    COUNTER,
    LEASE,
    QUEUE_ROW,
    UPSERT_ONCE,
    Model,
)
from tests.support.linearizability.recorder import Recorder, RecordingStore
from tests.support.linearizability.search import Result, check
from tests.support.linearizability.translate import Translated

__all__ = [
    "CAS_REGISTER",
    "COUNTER",
    "LEASE",
    "QUEUE_ROW",
    "UNKNOWN",
    "UPSERT_ONCE",
    "Call",
    "Checked",
    "Model",
    "Operation",
    "Recorder",
    "RecordingStore",
    "Result",
    "check",
    "check_calls",
    "check_recorded",
    "read_calls",
    "translate",
]


@dataclass(frozen=True)
class Checked:
    """A history's verdict: the search's result and the problems found before it."""

    result: Result
    problems: tuple[str, ...]
    calls: int

    @property
    def ok(self) -> bool:
        return self.result.ok and not self.problems

    def describe(self) -> str:
        lines = [f"{self.calls} recorded calls; " + self.result.describe()]
        lines += [f"problem: {problem}" for problem in self.problems[:10]]
        return "\n".join(lines)


def check_calls(
    calls: list[Call], model: Model, translation: Callable[[Iterable[Call]], Translated]
) -> Checked:
    translated = translation(calls)
    result = check(model, translated.operations)
    return Checked(result, tuple(translated.problems), len(calls))


def check_recorded(
    directory: Path | str, model: Model, translation: Callable[[Iterable[Call]], Translated]
) -> Checked:
    """Check every history file (``*.jsonl``) of ``directory`` as one history."""
    return check_calls(read_calls(sorted(Path(directory).glob("*.jsonl"))), model, translation)
