"""Sequential specifications: what each kind of object does when operations run one at a time.

A model is deterministic: from a state and an operation's name and input it
gives the one output the operation must return and the next state. So an
operation of unknown outcome needs no guessing: when the search linearizes it,
its output is whatever the model says (or it is never linearized: it had no
effect). States are hashable so the search can memoise ``(linearized, state)``.

One object per partition key (a row, a counter, a lease): the checker splits a
history by key and checks each part alone (P-compositionality), which is exact
for these models because no operation of one acts on another's key (a claim of
many rows is split into one operation per row before it gets here).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from tests.support.linearizability.history import Operation

Apply = Callable[[Any, Any], tuple[Hashable, Hashable]]


@dataclass(frozen=True)
class Model:
    """A sequential object: its initial state and, per operation name, how it applies."""

    name: str
    initial: Hashable
    operations: dict[str, Callable[[Any, Any], tuple[Hashable, Hashable]]]

    def step(self, state: Hashable, op: Operation) -> tuple[bool, Hashable]:
        """Apply ``op`` to ``state``: (whether its output is the model's, the next state)."""
        try:
            apply = self.operations[op.name]
        except KeyError:
            raise ValueError(f"model {self.name} has no operation {op.name!r}") from None
        output, following = apply(state, op.input)
        return (op.unknown or op.output == output), following


# -- a counter: increments that return the new value ---------------------------------------------


def _add(state: int, delta: int) -> tuple[Hashable, Hashable]:
    return state + delta, state + delta


def _add_if_above(state: int, arguments: tuple[int, int]) -> tuple[Hashable, Hashable]:
    """A guarded increment (a token bucket's take): applies only while the value > bound."""
    delta, bound = arguments
    if state > bound:
        return (True, state + delta), state + delta
    return (False, None), state


COUNTER = Model(
    "counter",
    0,
    {
        "add": _add,
        "add_if_above": _add_if_above,
        "read": lambda state, _: (state, state),
        "write": lambda _, value: (None, value),
    },
)


# -- a compare-and-set register: guarded updates ---------------------------------------------------


def _cas(state: Hashable, arguments: tuple[Hashable, Hashable]) -> tuple[Hashable, Hashable]:
    expected, new = arguments
    return (True, new) if state == expected else (False, state)


CAS_REGISTER = Model(
    "cas-register",
    None,
    {
        "cas": _cas,
        "read": lambda state, _: (state, state),
        "write": lambda _, value: (None, value),
    },
)


# -- an upsert-once register: seed-if-missing ------------------------------------------------------

#: The row exists, but an upsert with mutations changed it: later seeds return a value
#: this model does not track, so only their ``inserted`` is checked.
CHANGED = ("changed",)


def _seed(state: Hashable, value: Hashable) -> tuple[Hashable, Hashable]:
    """Seed-if-missing: ``(inserted, resulting value)``; inserted exactly once."""
    if state is None:
        return (True, value), value
    return (False, state), state


def _upsert(state: Hashable, value: Hashable) -> tuple[Hashable, Hashable]:
    """An upsert with mutations: only ``inserted`` is the output."""
    return (True, value) if state is None else (False, CHANGED)


class _UpsertOnce(Model):
    def step(self, state: Hashable, op: Operation) -> tuple[bool, Hashable]:
        if op.name == "seed" and state == CHANGED and not op.unknown:
            return op.output[0] is False, state  # the value is not tracked once changed
        return super().step(state, op)


UPSERT_ONCE = _UpsertOnce(
    "upsert-once",
    None,
    {"seed": _seed, "upsert": _upsert, "read": lambda state, _: (state, state)},
)


# -- a lease: acquire / take over on expiry / renew / release --------------------------------------


def _lease_seed(state: Any, arguments: tuple[str, str]) -> tuple[Hashable, Hashable]:
    """Acquire a lease nobody ever held (seed-if-missing): ``inserted``."""
    return (True, arguments) if state is None else (False, state)


def _take_over(state: Any, arguments: tuple[str, str, str]) -> tuple[Hashable, Hashable]:
    """Acquire an existing lease whose expiry is at or before the caller's ``now``."""
    holder, now, until = arguments
    if state is not None and state[1] <= now:
        return True, (holder, until)
    return False, state


def _renew(state: Any, arguments: tuple[str, str]) -> tuple[Hashable, Hashable]:
    holder, until = arguments
    if state is not None and state[0] == holder:
        return True, (holder, until)
    return False, state


def _release(state: Any, arguments: tuple[str, str]) -> tuple[Hashable, Hashable]:
    holder, now = arguments
    if state is not None and state[0] == holder:
        return True, (holder, now)
    return False, state


LEASE = Model(
    "lease",
    None,
    {
        "seed": _lease_seed,
        "take_over": _take_over,
        "renew": _renew,
        "release": _release,
        "read": lambda state, _: (state, state),
    },
)


# -- a claimable queue, one row at a time ----------------------------------------------------------
#
# A row is absent, pending, held by one claimer, or done (by whom). A claim's batch is split into one ``claim`` per row it
# returned (its size is checked against its limit before: ``translate``), so
# "no row held by two claimers without a release or a stale recovery in
# between" is this per-row model: ``claim`` needs ``pending``; only ``reclaim``
# (the stale-claim pass) or ``release`` moves a held row away from its holder.

ABSENT, PENDING = ("absent",), ("pending",)


def _enqueue(_: Hashable, __: Any) -> tuple[Hashable, Hashable]:
    return None, PENDING


def _claim(state: Any, claimer: str) -> tuple[Hashable, Hashable]:
    return (True, ("held", claimer)) if state == PENDING else (False, state)


def _reclaim(state: Any, claimer: str) -> tuple[Hashable, Hashable]:
    return (True, ("held", claimer)) if state[0] == "held" else (False, state)


def _complete(state: Any, claimer: str) -> tuple[Hashable, Hashable]:
    return (True, ("done", claimer)) if state == ("held", claimer) else (False, state)


def _release_row(state: Any, claimer: str) -> tuple[Hashable, Hashable]:
    return (True, PENDING) if state == ("held", claimer) else (False, state)


QUEUE_ROW = Model(
    "queue-row",
    ABSENT,
    {
        "enqueue": _enqueue,
        "claim": _claim,
        "reclaim": _reclaim,
        "complete": _complete,
        "release": _release_row,
        "read": lambda state, _: (state, state),
    },
)

MODELS = {model.name: model for model in (COUNTER, CAS_REGISTER, UPSERT_ONCE, LEASE, QUEUE_ROW)}
