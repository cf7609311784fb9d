"""Is a history linearizable? Wing & Gong's search, with Lowe's memoisation, per key.

The history of one key becomes a list of entries in time order: each
operation's invocation, and its completion if its caller saw one. The search
walks the list, tries to linearize (apply to the model) the first invoked
operation not yet linearized, and backtracks when it reaches the completion of
an operation it has not linearized yet (that operation had to take effect
before it returned). A pair (set of linearized operations, model state) seen
once is never explored again, which keeps histories of thousands of
operations to seconds (Lowe, "Testing for linearizability", 2017; Porcupine
does the same). The history is linearizable when every operation whose
completion was seen is linearized; operations of unknown outcome have no
completion, so they may be linearized at any point after their invocation or
not at all.

Operations of unknown outcome would make the search try every subset of them at
every point; two reductions keep it linear in their number, both exact:

* an unknown operation that would leave the state as it is is not linearized
  there (leaving it out explains the same, and keeps it for later);
* unknown operations with the same name and input are interchangeable: one is
  tried only while every such operation invoked before it is linearized already
  (any linearization using a later one can use the earlier one in its place).

And at each point the operations whose completion was seen are tried before
the unknown ones: a lost call that never applied is then never tried where the
history does not need it, and one that did apply is tried where the known
operations first fail to fit, the nearest choice point. (Refuting a history
with many unknown operations can still be exponential: ``budget`` bounds it.)

P-compositionality (Horn & Kroening, 2015): a history is linearizable iff the
sub-history of each key is, for models whose operations each act on one key;
each key is searched on its own.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from tests.support.linearizability.history import Operation
from tests.support.linearizability.models import Model


class SearchBudgetExceeded(RuntimeError):
    """The search took more steps than allowed: neither proof nor refutation."""


@dataclass(frozen=True)
class Violation:
    """A key whose history no order explains; the longest explainable prefix helps reading it."""

    key: Hashable
    operations: tuple[Operation, ...]
    longest: tuple[Operation, ...]

    def describe(self, limit: int = 12) -> str:
        linearized = {id(op) for op in self.longest}
        rest = [op for op in self.operations if id(op) not in linearized]
        lines = [f"key {self.key!r}: {len(self.operations)} operations, none order explains them"]
        lines.append(f"  longest linearization ({len(self.longest)}) ends with:")
        lines += [f"    {_show(op)}" for op in self.longest[-limit:]]
        lines.append("  operations it could not place next (first few):")
        lines += [f"    {_show(op)}" for op in rest[:limit]]
        return "\n".join(lines)


@dataclass(frozen=True)
class Result:
    """The verdict on a history, with what the search did."""

    model: str
    ok: bool
    keys: int
    operations: int
    unknown: int
    steps: int
    seconds: float
    violations: tuple[Violation, ...]

    def describe(self) -> str:
        verdict = "linearizable" if self.ok else f"NOT linearizable ({len(self.violations)} keys)"
        head = (
            f"{self.model}: {self.operations} operations ({self.unknown} of unknown outcome) "
            f"on {self.keys} keys: {verdict} in {self.seconds:.3f}s, {self.steps} steps"
        )
        return "\n".join([head, *(violation.describe() for violation in self.violations[:3])])


def _show(op: Operation) -> str:
    outcome = "?" if op.unknown else repr(op.output)
    return f"{op.process}: {op.name}({op.input!r}) -> {outcome}"


class _Entry:
    __slots__ = ("index", "is_call", "match", "next", "op", "prev", "twin")

    def __init__(self, index: int, op: Operation, is_call: bool) -> None:
        self.index = index
        self.op = op
        self.is_call = is_call
        self.match: _Entry | None = None  # a call's completion entry (None: unknown outcome)
        self.prev: _Entry | None = None
        self.next: _Entry | None = None
        self.twin = -1  # an unknown call's interchangeable predecessor (index), if any


def _entries(operations: list[Operation]) -> _Entry:
    """The doubly linked list of invocations and completions in time order, behind a head."""
    events: list[tuple[int, int, _Entry]] = []
    last_of_kind: dict[tuple[str, object], _Entry] = {}
    for index, op in sorted(enumerate(operations), key=lambda pair: pair[1].invoked):
        call = _Entry(index, op, True)
        if op.returned is None:
            previous = last_of_kind.get((op.name, op.input))
            call.twin = -1 if previous is None else previous.index
            last_of_kind[(op.name, op.input)] = call
        # At equal times an invocation sorts first: the two may have overlapped.
        events.append((op.invoked, 0, call))
        if op.returned is not None:
            if op.returned < op.invoked:
                raise ValueError(f"operation completes before it starts: {op}")
            ret = _Entry(index, op, False)
            call.match = ret
            events.append((op.returned, 1, ret))
    events.sort(key=lambda event: (event[0], event[1]))
    head = _Entry(-1, operations[0], False)  # a sentinel: its operation is never read
    last = head
    for _, _, entry in events:
        last.next, entry.prev = entry, last
        last = entry
    return head


def _lift(entry: _Entry) -> None:
    """Take a call (and its completion) out of the list."""
    assert entry.prev is not None
    entry.prev.next = entry.next
    if entry.next is not None:
        entry.next.prev = entry.prev
    match = entry.match
    if match is not None:
        assert match.prev is not None
        match.prev.next = match.next
        if match.next is not None:
            match.next.prev = match.prev


def _unlift(entry: _Entry) -> None:
    """Put a lifted call (and its completion) back where it was."""
    match = entry.match
    if match is not None:
        assert match.prev is not None
        match.prev.next = match
        if match.next is not None:
            match.next.prev = match
    assert entry.prev is not None
    entry.prev.next = entry
    if entry.next is not None:
        entry.next.prev = entry


def _search(model: Model, operations: list[Operation], budget: int) -> tuple[bool, list[int], int]:
    """Linearize one key's history: (whether it can be, the longest linearization, steps)."""
    if not operations:
        return True, [], 0
    head = _entries(operations)
    remaining = sum(1 for op in operations if op.returned is not None)
    state: Hashable = model.initial
    linearized = 0
    seen: set[tuple[int, Hashable]] = set()
    stack: list[tuple[_Entry, Hashable]] = []
    longest: list[int] = []
    steps = 0
    entry = head.next
    unknown_pass = False  # first the calls whose completion was seen, then the others
    while remaining:
        steps += 1
        if steps > budget:
            raise SearchBudgetExceeded(f"{model.name}: more than {budget} steps")
        assert entry is not None, "a completion always precedes the end of the list"
        if entry.is_call:
            if (entry.match is None) != unknown_pass or (
                entry.twin >= 0 and not linearized >> entry.twin & 1
            ):
                entry = entry.next  # not this pass's, or its interchangeable predecessor first
                continue
            accepted, following = model.step(state, entry.op)
            if entry.match is None and following == state:
                accepted = False  # an unknown no-op: leaving it out explains the same
            if accepted:
                chosen = linearized | (1 << entry.index)
                if (chosen, following) not in seen:
                    seen.add((chosen, following))
                    stack.append((entry, state))
                    state, linearized = following, chosen
                    if entry.match is not None:
                        remaining -= 1
                    _lift(entry)
                    if len(stack) > len(longest):
                        longest = [item.index for item, _ in stack]
                    entry, unknown_pass = head.next, False
                    continue
            entry = entry.next
            continue
        # The completion of an operation not linearized yet: it had to go before.
        if not unknown_pass:
            entry, unknown_pass = head.next, True  # an unknown operation may fit first
            continue
        if not stack:  # nothing fits: undo the last choice
            return False, longest, steps
        entry, state = stack.pop()
        unknown_pass = entry.match is None
        linearized &= ~(1 << entry.index)
        if entry.match is not None:
            remaining += 1
        _unlift(entry)
        entry = entry.next
    return True, [item.index for item, _ in stack], steps


def check(model: Model, operations: Iterable[Operation], *, budget: int = 5_000_000) -> Result:
    """Check a history against ``model``, one key at a time; every violating key is reported."""
    started = time.monotonic()
    by_key: dict[Hashable, list[Operation]] = defaultdict(list)
    for op in operations:
        by_key[op.key].append(op)
    violations: list[Violation] = []
    steps = total = unknown = 0
    for key, ops in by_key.items():
        ok, longest, taken = _search(model, ops, budget)
        steps += taken
        total += len(ops)
        unknown += sum(1 for op in ops if op.unknown)
        if not ok:
            violations.append(Violation(key, tuple(ops), tuple(ops[i] for i in longest)))
    return Result(
        model=model.name,
        ok=not violations,
        keys=len(by_key),
        operations=total,
        unknown=unknown,
        steps=steps,
        seconds=time.monotonic() - started,
        violations=tuple(violations),
    )
