"""Triggers: wake a dispatcher when claimable rows appear (see docs/recipes/event-driven-dispatcher.md).

* :class:`ClaimableRowsTrigger` -- a ``BaseEventTrigger`` for an ``AssetWatcher``:
  event-driven dispatcher DAGs, with storm control.
* :class:`ClaimWaitTrigger` -- what a deferrable ``AtomicClaimOperator`` waits on.
"""

from __future__ import annotations

from airflow_atomic_store.triggers.claim_wait import ClaimWaitTrigger
from airflow_atomic_store.triggers.claimable_rows import ClaimableRowsTrigger

__all__ = ["ClaimWaitTrigger", "ClaimableRowsTrigger"]
