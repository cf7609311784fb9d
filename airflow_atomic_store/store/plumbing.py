"""What the triggers ask of a store beyond its verbs; not part of the public API.

A trigger counts a queue as a claim would select it (``QueueViews.backlog_selection``)
and, where the backend's writes notify (``Backend.notifications``), listens for
them and counts on its listening connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_atomic_store.store.atomic_store import AtomicStore
    from airflow_atomic_store.store.notify import Notifications
    from airflow_atomic_store.store.queue_views import QueueViews


@dataclass(frozen=True)
class Plumbing:
    queues: QueueViews
    notifications: Notifications | None


def plumbing(store: AtomicStore) -> Plumbing:
    return Plumbing(store._queues, store._backend.notifications())
