"""Record store calls as they happen, one JSON line per event, from any process.

Two ways to record, both writing the same events to the same kind of file:

* ``RecordingStore(store, recorder)`` wraps an :class:`AtomicStore`: every
  primitive and row verb called through it is recorded with its arguments and
  result (or error). Use it where a whole worker's calls matter::

      with Recorder(history_dir, "worker-3") as recorder:
          store = RecordingStore(AtomicStore(url), recorder)
          store.atomic_update("counters", "total", mutations=[...])

* ``with recorder.call("atomic_claim", table=..., where=...) as call:`` around
  any code, then ``call.returned(result)``: for a call made some other way
  (a hand-written statement, a test-only buggy claim).

The invocation line is written and flushed *before* the call starts, so a
process killed mid-call leaves an invocation without a completion: an
operation of unknown outcome (``history.read_calls``). An error leaves the
outcome unknown too, unless it is one that proves nothing was written
(``NO_EFFECT``: a bad spec, judged before any I/O).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from airflow_atomic_store import AtomicStore
from airflow_atomic_store.exceptions import IdempotencyKeyError, SpecError

#: Errors raised before any write: the call certainly had no effect.
NO_EFFECT: tuple[type[BaseException], ...] = (SpecError, IdempotencyKeyError)

RECORDED_METHODS = (
    "atomic_update",
    "atomic_claim",
    "atomic_upsert",
    "put",
    "get",
    "delete",
    "query",
)


class Recorder:
    """Append one process's events to ``<directory>/<process>.jsonl``.

    One file per process: no two processes ever write to one file, so no
    line is interleaved or torn by another writer.
    """

    def __init__(self, directory: Path | str, process: str) -> None:
        self.process = process
        self.path = Path(directory) / f"{process}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", buffering=1)
        self._seq = 0

    def _write(self, event: dict[str, Any]) -> None:
        self._file.write(json.dumps(event, default=repr) + "\n")
        self._file.flush()

    @contextmanager
    def call(self, method: str, **args: Any) -> Iterator[_PendingCall]:
        """Record one call: its invocation now, its completion when the block ends.

        The block must call ``returned(result)``; an exception leaves the call
        ``unknown`` (or ``failed`` for ``NO_EFFECT`` errors) and propagates.
        """
        self._seq += 1
        seq = self._seq
        self._write(
            {
                "type": "invoke",
                "process": self.process,
                "seq": seq,
                "method": method,
                "args": args,
                "pid": os.getpid(),
                "time": time.monotonic_ns(),
            }
        )
        pending = _PendingCall()
        try:
            yield pending
        except BaseException as exc:
            kind = "failed" if isinstance(exc, NO_EFFECT) else "unknown"
            self._write(
                {
                    "type": kind,
                    "process": self.process,
                    "seq": seq,
                    "error": f"{type(exc).__name__}: {exc}",
                    "time": time.monotonic_ns(),
                }
            )
            raise
        if not pending.done:
            raise AssertionError(f"recorded call {method} ended without returned(...)")
        self._write(
            {
                "type": "ok",
                "process": self.process,
                "seq": seq,
                "result": pending.result,
                "time": pending.time,
            }
        )

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class _PendingCall:
    def __init__(self) -> None:
        self.done = False
        self.result: Any = None
        self.time = 0

    def returned(self, result: Any) -> Any:
        """Note the call's result, timed now (before the recorder's own bookkeeping)."""
        self.time = time.monotonic_ns()
        self.done = True
        self.result = result
        return result


class RecordingStore:
    """An :class:`AtomicStore` whose primitives and row verbs are recorded.

    Anything else (``close``, ``claim_sets``…) passes through unrecorded.
    """

    def __init__(self, store: AtomicStore, recorder: Recorder) -> None:
        self.store = store
        self.recorder = recorder

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.store, name)
        if name not in RECORDED_METHODS:
            return target

        def recorded(*args: Any, **kwargs: Any) -> Any:
            arguments = {**dict(zip(("table", "key", "value"), args, strict=False)), **kwargs}
            with self.recorder.call(name, **arguments) as call:
                return call.returned(target(*args, **kwargs))

        return recorded

    def __enter__(self) -> RecordingStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.store.close()
