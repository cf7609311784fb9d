"""The linearizability checker (tests/support/linearizability) on histories whose verdict is known.

No database here: hand-written histories that are and are not linearizable for
each model, operations of unknown outcome, a brute-force cross-check of the
search on small random histories, and the time a few thousand operations on
one key take. The injected bugs on a real database are in
tests/reliability/test_linearizability_injected_bugs.py.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Hashable
from typing import Any

import pytest

from tests.support.linearizability import (
    CAS_REGISTER,
    COUNTER,
    LEASE,
    QUEUE_ROW,
    UNKNOWN,
    UPSERT_ONCE,
    Model,
    Operation,
    check,
)
from tests.support.linearizability.search import SearchBudgetExceeded


def op(
    process: str,
    name: str,
    arguments: Hashable,
    output: Any,
    invoked: int,
    returned: int | None,
    key: Hashable = "k",
) -> Operation:
    if returned is None:
        output = UNKNOWN
    return Operation(process, name, key, arguments, output, invoked, returned)


# -- counter ------------------------------------------------------------------------------------


def test_overlapping_increments_may_take_effect_in_either_order() -> None:
    history = [
        op("a", "add", 1, 2, 0, 10),  # a overlaps b: b may have gone first
        op("b", "add", 1, 1, 1, 9),
        op("c", "read", None, 2, 11, 12),
    ]
    assert check(COUNTER, history).ok


def test_two_increments_returning_the_same_value_are_a_lost_update() -> None:
    history = [op("a", "add", 1, 1, 0, 10), op("b", "add", 1, 1, 1, 9)]
    result = check(COUNTER, history)
    assert not result.ok
    assert result.violations[0].key == "k"
    assert "none order explains them" in result.describe()


def test_a_read_after_an_increment_returned_must_see_it() -> None:
    history = [op("a", "add", 1, 1, 0, 5), op("b", "read", None, 0, 6, 7)]
    assert not check(COUNTER, history).ok


def test_a_guarded_decrement_never_takes_the_last_token_twice() -> None:
    taken = [op(p, "add_if_above", (-1, 0), (True, 0), 0, 10) for p in "ab"]
    seeded = op("w", "write", 1, None, -2, -1)
    assert not check(COUNTER, [seeded, *taken]).ok
    refused = op("b", "add_if_above", (-1, 0), (False, None), 0, 10)
    assert check(COUNTER, [seeded, taken[0], refused]).ok


# -- unknown outcomes ------------------------------------------------------------------------------


def test_an_unknown_increment_may_have_taken_effect() -> None:
    history = [op("a", "add", 1, None, 0, None), op("b", "read", None, 1, 5, 6)]
    assert check(COUNTER, history).ok


def test_an_unknown_increment_may_never_have_taken_effect() -> None:
    history = [op("a", "add", 1, None, 0, None), op("b", "read", None, 0, 5, 6)]
    assert check(COUNTER, history).ok


def test_an_unknown_increment_takes_effect_once_at_most() -> None:
    history = [op("a", "add", 1, None, 0, None), op("b", "read", None, 2, 5, 6)]
    assert not check(COUNTER, history).ok


def test_an_unknown_operation_takes_effect_after_its_invocation_never_before() -> None:
    history = [op("b", "read", None, 1, 0, 1), op("a", "add", 1, None, 5, None)]
    assert not check(COUNTER, history).ok


def test_an_unknown_operation_may_take_effect_after_later_operations() -> None:
    history = [
        op("a", "add", 5, None, 0, None),
        op("b", "add", 1, 1, 2, 3),
        op("c", "read", None, 6, 4, 5),
    ]
    assert check(COUNTER, history).ok


# -- compare-and-set register, upsert-once register, lease ------------------------------------------


def test_two_compare_and_sets_from_the_same_value_cannot_both_succeed() -> None:
    history = [
        op("w", "write", 0, None, 0, 1),
        op("a", "cas", (0, 1), True, 2, 10),
        op("b", "cas", (0, 1), True, 3, 9),
    ]
    assert not check(CAS_REGISTER, history).ok
    loser = op("b", "cas", (0, 1), False, 3, 9)
    assert check(CAS_REGISTER, [*history[:2], loser]).ok


def test_a_compare_and_set_fails_only_when_the_value_differs() -> None:
    history = [op("w", "write", 0, None, 0, 1), op("a", "cas", (0, 1), False, 2, 3)]
    assert not check(CAS_REGISTER, history).ok


def test_seed_if_missing_inserts_exactly_once_and_returns_the_winners_value() -> None:
    winner = op("a", "seed", "A", (True, "A"), 0, 10)
    loser = op("b", "seed", "B", (False, "A"), 1, 9)
    assert check(UPSERT_ONCE, [winner, loser]).ok
    assert not check(UPSERT_ONCE, [winner, op("b", "seed", "B", (True, "B"), 1, 9)]).ok
    assert not check(UPSERT_ONCE, [winner, op("b", "seed", "B", (False, "B"), 1, 9)]).ok
    inserted, changed = op("a", "upsert", "A", True, 0, 1), op("c", "upsert", "C", False, 2, 3)
    assert not check(UPSERT_ONCE, [inserted, op("b", "seed", "B", (False, "?"), 4, 5)]).ok
    assert check(UPSERT_ONCE, [inserted, changed, op("b", "seed", "B", (False, "?"), 4, 5)]).ok


T = "2026-01-01T00:00:{:02d}.000000Z".format


def test_a_lease_goes_to_one_holder_until_it_expires_or_is_released() -> None:
    seeded = op("a", "seed", ("a", T(10)), True, 0, 1)
    early = op("b", "take_over", ("b", T(5), T(15)), True, 2, 3)
    assert not check(LEASE, [seeded, early]).ok, "taken over before it expired"
    expired = op("b", "take_over", ("b", T(10), T(20)), True, 2, 3)
    assert check(LEASE, [seeded, expired]).ok
    late_renewal = op("a", "renew", ("a", T(30)), True, 4, 5)
    assert not check(LEASE, [seeded, expired, late_renewal]).ok, "renewed a lost lease"
    released = op("a", "release", ("a", T(2)), True, 2, 3)
    after = op("b", "take_over", ("b", T(3), T(20)), True, 4, 5)
    assert check(LEASE, [seeded, released, after]).ok


# -- the per-row queue -----------------------------------------------------------------------------


def test_a_row_is_never_held_by_two_claimers_at_once() -> None:
    enqueued = op("p", "enqueue", None, None, 0, 1)
    history = [enqueued, op("a", "claim", "a", True, 2, 10), op("b", "claim", "b", True, 3, 9)]
    assert not check(QUEUE_ROW, history).ok


def test_a_stale_claim_recovery_or_a_release_passes_a_row_on() -> None:
    enqueued = op("p", "enqueue", None, None, 0, 1)
    claimed = op("a", "claim", "a", True, 2, 3)
    reclaimed = op("r", "reclaim", "r", True, 4, 5)
    too_late = op("a", "complete", "a", False, 6, 7)
    done = op("r", "complete", "r", True, 8, 9)
    read = op("p", "read", None, ("done", "r"), 10, 11)
    assert check(QUEUE_ROW, [enqueued, claimed, reclaimed, too_late, done, read]).ok
    assert not check(
        QUEUE_ROW, [enqueued, claimed, reclaimed, op("a", "complete", "a", True, 6, 7)]
    ).ok
    released = op("a", "release", "a", True, 4, 5)
    assert check(QUEUE_ROW, [enqueued, claimed, released, op("b", "claim", "b", True, 6, 7)]).ok


def test_a_claim_of_unknown_outcome_explains_a_later_recovery_or_nothing() -> None:
    enqueued = op("p", "enqueue", None, None, 0, 1)
    lost = op("a", "claim", "a", None, 2, None)
    assert check(QUEUE_ROW, [enqueued, lost, op("r", "reclaim", "r", True, 4, 5)]).ok
    assert check(QUEUE_ROW, [enqueued, lost, op("b", "claim", "b", True, 4, 5)]).ok
    # With no claim at all, a stale-claim pass has nothing to recover.
    assert not check(QUEUE_ROW, [enqueued, op("r", "reclaim", "r", True, 4, 5)]).ok


# -- the search itself -----------------------------------------------------------------------------


def _brute_force(model: Model, history: list[Operation]) -> bool:
    """Every order that respects real time, each unknown operation in or out: any explains it?"""
    unknown = [o for o in history if o.unknown]
    for included in itertools.product((False, True), repeat=len(unknown)):
        chosen = [o for o in history if not o.unknown]
        chosen += [o for o, keep in zip(unknown, included, strict=True) if keep]
        for order in itertools.permutations(chosen):
            if any(
                later.returned is not None and later.returned < earlier.invoked
                for i, earlier in enumerate(order)
                for later in order[i + 1 :]
            ):
                continue
            state: Hashable = model.initial
            for o in order:
                accepted, state = model.step(state, o)
                if not accepted:
                    break
            else:
                return True
    return False


def _random_counter_history(rng: random.Random, size: int) -> list[Operation]:
    history = []
    for i in range(size):
        start = rng.randrange(20)
        end = None if rng.random() < 0.2 else start + rng.randrange(1, 8)
        if rng.random() < 0.5:
            history.append(op(f"p{i}", "add", rng.choice((1, 2)), rng.randrange(6), start, end))
        else:
            history.append(op(f"p{i}", "read", None, rng.randrange(6), start, end))
    return history


def test_the_search_agrees_with_brute_force_on_small_random_histories() -> None:
    rng = random.Random(35)
    verdicts = []
    for _ in range(400):
        history = _random_counter_history(rng, rng.randrange(1, 6))
        expected = _brute_force(COUNTER, history)
        assert check(COUNTER, history).ok == expected, history
        verdicts.append(expected)
    assert 40 < sum(verdicts) < 360, "both verdicts are exercised"


def _concurrent_increments(
    processes: int, each: int, unknown_every: int, lost_ones_applied: bool = True
) -> list[Operation]:
    """A linearizable history: each process's increments overlap the others' at random.

    Every ``unknown_every``-th increment's reply is lost; it took effect at its
    point, or (``lost_ones_applied=False``) never.
    """
    rng = random.Random(7)
    clock = [0] * processes
    points: list[tuple[int, int, int, int]] = []  # (point, process, invoked, returned)
    for process in range(processes):
        for _ in range(each):
            invoked = clock[process] + rng.randrange(3)
            returned = invoked + rng.randrange(1, 40)
            points.append((rng.randrange(invoked, returned), process, invoked, returned))
            clock[process] = returned + 1
    points.sort()
    history, value = [], 0
    for number, (_, process, invoked, returned) in enumerate(points, start=1):
        lost = unknown_every and number % unknown_every == 0
        if not lost or lost_ones_applied:
            value += 1
        history.append(op(f"p{process}", "add", 1, value, invoked, None if lost else returned))
    return history


def test_a_few_thousand_concurrent_operations_on_one_key_check_in_seconds() -> None:
    history = _concurrent_increments(processes=8, each=500, unknown_every=97)
    started = time.monotonic()
    result = check(COUNTER, history)
    assert result.ok and result.operations == 4000 and result.unknown == 41
    assert time.monotonic() - started < 20, result.describe()
    # The same history with one output changed is refuted, as fast.
    broken = list(history)
    broken[2000] = op(
        "x", "add", 1, broken[1999].output, broken[2000].invoked, broken[2000].returned
    )
    assert not check(COUNTER, broken).ok


def test_many_lost_increments_that_never_applied_check_in_seconds() -> None:
    """Each lost increment could apply at any later point: the search must not try every subset."""
    history = _concurrent_increments(
        processes=8, each=250, unknown_every=20, lost_ones_applied=False
    )
    started = time.monotonic()
    result = check(COUNTER, history)
    assert result.ok and result.unknown == 100
    assert time.monotonic() - started < 20, result.describe()


def test_a_search_that_cannot_finish_in_its_budget_says_so_rather_than_guessing() -> None:
    history = _concurrent_increments(processes=8, each=50, unknown_every=0)
    with pytest.raises(SearchBudgetExceeded):
        check(COUNTER, history, budget=10)
