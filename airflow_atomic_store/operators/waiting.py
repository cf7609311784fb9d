"""What a deferrable operator's wait is made of: rounds, a deadline, a trigger to wait on.

A deferrable claim (or guarded update) that finds nothing waits in the triggerer
and tries again when it wakes. Its idempotency key spans the whole wait: each
attempt is recorded under its own round (``<key>``, ``<key>/wait-1``, …), so a
retried task replays the rounds that found nothing without waiting again, and
stops at the round that applied (replaying it) or at the first round not yet run.
The rounds' receipts must outlive the wait: a keyed wait ends, as if timed out,
after a third of the store's ``receipt_retention``, and a retry has the rest.
(Airflow 3.3's ``dag.test()`` resumes a task with the trigger's event in place of
the deferral's kwargs: the resumed wait starts at round 1 with no deadline, which
the rounds' receipts make harmless.)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow_atomic_store import timestamps
from airflow_atomic_store.spec.watch import parse_seconds
from airflow_atomic_store.store.atomic_store import MAX_KEY_BYTES

#: The longest ``wait_timeout``: 30 days.
WAIT_BOUNDS = (0.0, 30 * 86_400.0)
#: Seconds a wait whose templates read the clock lasts before they are rendered again.
RERENDER_SECONDS = 60.0
#: A keyed wait lasts at most the receipt retention over this.
RETENTION_SHARES = 3
#: Airflow's own deferral timeout is the trigger's deadline plus this: it only
#: fires when the triggerer could not deliver the trigger's timeout event.
DEFER_GRACE = timedelta(minutes=5)


def parse_wait_timeout(wait_timeout: timedelta | float | None) -> float | None:
    return (
        None if wait_timeout is None else parse_seconds(wait_timeout, "wait_timeout", WAIT_BOUNDS)
    )


@dataclass
class Wait:
    """One run of a deferrable operator's wait: which round it is in, until when it waits.

    Made afresh for each run of the task, from where the wait stood when Airflow
    resumed it (``BaseAtomicOperator.resume_after_wait``: the round and deadline come
    back as the resume method's kwargs).
    """

    wait_timeout: float | None
    round: int = 0
    deadline: str | None = None
    waited_out: bool = False

    def key(self, idempotency_key: str | None) -> str | None:
        """The idempotency key of this round's attempt.

        Bounded by construction: a key near the store's limit would make
        ``<key>/wait-N`` too long only once round 0 was recorded, so the key gives
        way to its digest then (the same on every try, so a retry replays the round).
        """
        if idempotency_key is None or self.round == 0:
            return idempotency_key
        suffix = f"/wait-{self.round}"
        if len((idempotency_key + suffix).encode()) <= MAX_KEY_BYTES:
            return idempotency_key + suffix
        return "sha256:" + hashlib.sha256(idempotency_key.encode()).hexdigest() + suffix

    def over(self) -> bool:
        """Whether the wait has ended: the trigger timed out, or the deadline passed."""
        if self.waited_out:
            return True
        if self.deadline is None:
            return False
        return timestamps.parse_timestamp(self.deadline) <= timestamps.utc_now()

    def longest(self, receipt_retention: float, keyed: bool, log: Any) -> float | None:
        """``wait_timeout``; keyed, at most a third of the receipt retention.

        A retry replays the rounds from round 0 on. Were round 0's receipt to
        expire, a retry would apply live beside what a later round applied.
        """
        if not keyed:
            return self.wait_timeout
        longest = receipt_retention / RETENTION_SHARES
        if self.wait_timeout is not None and self.wait_timeout <= longest:
            return self.wait_timeout
        if self.deadline is None:
            log.info(
                "waiting at most %.0fs (a third of the store's receipt_retention) so that a "
                "retry can replay this wait's rounds",
                longest,
            )
        return longest

    def attempt(
        self,
        operator: Any,
        idempotency_key: str | None,
        attempt: Callable[[str | None], dict[str, Any]],
        applied: Callable[[dict[str, Any]], bool],
        *,
        receipt_retention: float,
        read_clock: bool,
        waiting_for: str,
    ) -> dict[str, Any]:
        """Attempt round after round until one ``applied`` or the wait is over.

        A live attempt that did not apply defers ``operator`` (``TaskDeferred``); the
        task comes back through ``resume_after_wait`` in the next round. A replayed
        round that did not apply was run by an earlier try: go on to the next one.
        """
        while True:
            result = attempt(self.key(idempotency_key))
            if applied(result) or self.over():
                return result
            self.round += 1
            if not result.get("replayed"):
                operator.log.info(
                    "%s: waiting in the triggerer (round %d, until %s)",
                    waiting_for,
                    self.round,
                    self.deadline or "it may apply",
                )
                longest = self.longest(receipt_retention, idempotency_key is not None, operator.log)
                self.defer(operator, longest, read_clock)

    def defer(self, operator: Any, wait: float | None, read_clock: bool) -> None:
        """Defer ``operator`` on its ``wait_trigger(deadline=, rerender_at=)``.

        ``read_clock``: a template read the time (``{{ atomic.now }}``), so the
        operator's filter goes stale by the clock alone: the wait then ends every
        ``RERENDER_SECONDS`` for the task to render, try, and wait anew.
        """
        if self.deadline is None and wait is not None:
            self.deadline = timestamps.shifted(timedelta(seconds=wait))
        timeout = None
        if self.deadline is not None:
            remaining = timestamps.parse_timestamp(self.deadline) - timestamps.utc_now()
            timeout = max(remaining, timedelta(0)) + DEFER_GRACE
        rerender_at = (
            timestamps.shifted(timedelta(seconds=RERENDER_SECONDS)) if read_clock else None
        )
        operator.defer(
            trigger=operator.wait_trigger(deadline=self.deadline, rerender_at=rerender_at),
            method_name="resume_after_wait",
            kwargs={"round": self.round, "deadline": self.deadline},
            timeout=timeout,
        )
