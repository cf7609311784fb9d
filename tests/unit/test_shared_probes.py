"""The shared probe's and the notifier backoff's own rules, without a database.

The probes' behaviour against real stores is in tests/integration/test_waiting_at_scale.py;
here a read is a plain coroutine that counts its calls, so the rules are seen exactly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from airflow_atomic_store.store.notify import BACKOFF_CAP, BACKOFF_FIRST, Backoff
from airflow_atomic_store.triggers.hub import NOTHING, SharedProbe


def test_backoff_doubles_with_jitter_up_to_its_cap_and_starts_over_when_reset() -> None:
    backoff = Backoff()
    pauses = [backoff.next() for _ in range(12)]
    ceilings = [min(BACKOFF_CAP, BACKOFF_FIRST * 2**n) for n in range(12)]
    assert all(
        ceiling / 2 <= pause <= ceiling for pause, ceiling in zip(pauses, ceilings, strict=True)
    )
    assert max(pauses) <= BACKOFF_CAP
    backoff.reset()
    assert backoff.next() <= BACKOFF_FIRST


def test_a_burst_of_wakes_costs_a_read_or_two_and_every_waiter_sees_a_read_after_it_joined() -> (
    None
):
    async def scenario() -> tuple[int, list[Any], list[Any]]:
        reads: list[Mapping[str, str | None]] = []
        version = 0

        async def read(keys: Mapping[str, str | None]) -> Mapping[str, tuple[Any, None]]:
            reads.append(keys)
            seen = version
            await asyncio.sleep(0.01)
            return {key: (seen, None) for key in keys}

        probe = SharedProbe(read, on_empty=lambda _: None)
        waiters = [probe.join(f"k{n % 3}", 60.0) for n in range(30)]
        first = [await waiter.observe(5) for waiter in waiters]
        before = len(reads)
        version = 1
        for _ in range(100):  # a hundred notifications at once
            probe.request()
        second = [await waiter.observe(5) for waiter in waiters]
        burst = len(reads) - before
        quiet = await waiters[0].observe(0.05)  # nothing changed since: nothing new
        for waiter in waiters:
            waiter.leave()
        return burst, [*first, *second], [quiet]

    burst, observed, quiet = asyncio.run(scenario())
    assert burst <= 2
    assert observed == [0] * 30 + [1] * 30
    assert quiet == [NOTHING]
