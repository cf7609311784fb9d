"""Histories: what each process invoked, when, and what came back (or that nobody knows).

A history is a list of :class:`Operation`. Each has an invocation time and, when
its caller saw the result, a completion time and an output. An operation whose
reply was lost (the database went away mid-call, the process was SIGKILLed)
has ``output is UNKNOWN`` and ``returned is None``: it may have taken effect at
any moment after its invocation, or never. The checker treats it exactly so;
it is never dropped, because an effect nobody saw can still explain (or
contradict) what later operations observed.

Times are ``time.monotonic_ns()``: on Linux one clock for every process of the
machine, so invocations and completions of different processes compare.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class _Unknown:
    """The output of an operation whose outcome was never seen."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __reduce__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


@dataclass(frozen=True)
class Operation:
    """One operation as the checker sees it: a model operation on one partition key.

    ``name`` and ``input`` are the model's (``add``, ``claim``…), ``key`` the
    object it acts on (P-compositionality checks each key on its own);
    ``input`` and ``output`` must be hashable (tuples, frozensets, scalars).
    """

    process: str
    name: str
    key: Hashable
    input: Hashable
    output: Any
    invoked: int
    returned: int | None

    @property
    def unknown(self) -> bool:
        return self.returned is None


@dataclass(frozen=True)
class Call:
    """One recorded store call, before a translation turns it into model operations.

    ``status`` is ``"ok"`` (``result`` holds what the call returned),
    ``"unknown"`` (an error or a kill left its outcome open: ``error`` says
    which) or ``"failed"`` (an error that proves nothing was written, such as
    a ``SpecError`` raised before any I/O).
    """

    process: str
    seq: int
    method: str
    args: dict[str, Any]
    invoked: int
    returned: int | None = None
    status: str = "unknown"
    result: Any = None
    error: str | None = None
    tags: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def read_calls(paths: Iterable[Path | str]) -> list[Call]:
    """Pair the invocation and completion lines of JSON-lines history files into calls.

    A call with an invocation line and no completion line (its process was
    killed, or is still running) comes back with status ``"unknown"``. The calls
    are ordered by invocation time.
    """
    calls: dict[tuple[str, int], Call] = {}
    for path in paths:
        text = Path(path).read_text()
        if not text.endswith("\n"):
            # A process killed mid-write leaves a torn last line: an invocation not
            # yet started, or a completion that then stays unknown.
            text = text[: text.rfind("\n") + 1]
        for line in text.splitlines():
            if not line.strip():
                continue
            event = json.loads(line)
            ident = (event["process"], event["seq"])
            if event["type"] == "invoke":
                calls[ident] = Call(
                    process=event["process"],
                    seq=event["seq"],
                    method=event["method"],
                    args=event["args"],
                    invoked=event["time"],
                    tags=event.get("tags", {}),
                )
                continue
            invoked = calls.pop(ident)
            calls[ident] = Call(
                process=invoked.process,
                seq=invoked.seq,
                method=invoked.method,
                args=invoked.args,
                invoked=invoked.invoked,
                returned=event["time"] if event["type"] != "unknown" else None,
                status=event["type"],
                result=event.get("result"),
                error=event.get("error"),
                tags=invoked.tags,
            )
    return sorted(calls.values(), key=lambda call: (call.invoked, call.process, call.seq))


def freeze(value: Any) -> Hashable:
    """A hashable, order-insensitive-for-objects image of a JSON value (model states compare it)."""
    if isinstance(value, dict):
        return frozenset((name, freeze(item)) for name, item in value.items())
    if isinstance(value, list):
        return tuple(freeze(item) for item in value)
    return value
