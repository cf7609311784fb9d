"""A store held open in another OS process that runs the calls it is sent, one at a time.

Like a triggerer or a producer: it opens its store once and keeps it (and whatever
the store remembers, such as PostgreSQL's table ids) between calls, while the test
changes the database around it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from devkit.processes import worker_context


def _serve(url: str, calls: Any, replies: Any) -> None:
    from airflow_atomic_store import AtomicStore

    with AtomicStore(url) as store:
        while (call := calls.get()) is not None:
            verb, args, kwargs = call
            try:
                replies.put(("ok", getattr(store, verb)(*args, **kwargs)))
            except Exception as exc:  # sent back: the test asserts on it
                replies.put(("error", f"{type(exc).__name__}: {exc}"))


class LongLivedStore:
    def __init__(self, calls: Any, replies: Any) -> None:
        self._calls = calls
        self._replies = replies

    def call(self, verb: str, *args: Any, **kwargs: Any) -> tuple[str, Any]:
        """``("ok", result)`` or ``("error", "Type: message")``."""
        self._calls.put((verb, args, kwargs))
        return self._replies.get(timeout=60)  # type: ignore[no-any-return]


@contextmanager
def long_lived_store(url: str) -> Iterator[LongLivedStore]:
    context = worker_context()
    calls, replies = context.Queue(), context.Queue()
    process = context.Process(target=_serve, args=(url, calls, replies), daemon=True)
    process.start()
    try:
        yield LongLivedStore(calls, replies)
    finally:
        calls.put(None)
        process.join(timeout=30)
        if process.is_alive():
            process.terminate()
            process.join(timeout=5)
