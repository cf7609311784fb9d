"""The operators' metrics, sent through Airflow's own ``Stats``.

They go wherever the deployment already sends Airflow's metrics (StatsD, Datadog,
OpenTelemetry), named ``atomic_store.<primitive>.<measure>``. Each is sent twice:

* tagged with ``table``, ``dag_id`` and ``task_id`` (and ``kind`` for errors), for
  backends that keep tags (OpenTelemetry, Datadog, StatsD with
  ``statsd_influxdb_enabled``);
* with the table in the name, ``atomic_store.<primitive>.<measure>.<table>`` (errors:
  ``atomic_store.<primitive>.errors.<kind>.<table>``), because plain StatsD drops tags
  and a per-table view is the point of most of these.

A metric is never in the way of the primitive: a backend that fails to send is
logged and ignored. ``docs/observing.md`` lists every name.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from airflow_atomic_store.exceptions import (
    AccessDeniedError,
    ConnectionConfigError,
    IdempotencyKeyError,
    MutationError,
    SpecError,
    StoreUnavailableError,
)

log = logging.getLogger(__name__)

PREFIX = "atomic_store"

#: Error kinds by exception class, most specific first; anything else is ``other``.
ERROR_KINDS: tuple[tuple[type[Exception], str], ...] = (
    (SpecError, "spec"),
    (MutationError, "mutation"),
    (IdempotencyKeyError, "idempotency_key"),
    (AccessDeniedError, "access_denied"),
    (ConnectionConfigError, "connection"),
    (StoreUnavailableError, "store_unavailable"),
)
OTHER_ERROR = "other"

_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_-]")
_NAME_LIMIT = 250  # Airflow's stat name validator refuses longer names


def error_kind(exc: BaseException) -> str:
    """The ``kind`` an error is counted under."""
    return next((kind for cls, kind in ERROR_KINDS if isinstance(exc, cls)), OTHER_ERROR)


def name_part(text: str) -> str:
    """``text`` as one segment of a metric name.

    A dot would add a level to a StatsD hierarchy, so it becomes ``__`` as in
    Airflow's own legacy names; other characters StatsD names cannot hold become ``_``.
    """
    return _NOT_IN_A_NAME.sub("_", text.replace(".", "__"))


@dataclass(frozen=True)
class PrimitiveMetrics:
    """The metrics of one operator's call of ``primitive`` on ``table``."""

    primitive: str
    table: str
    dag_id: str
    task_id: str

    @property
    def tags(self) -> dict[str, str]:
        return {"table": self.table, "dag_id": self.dag_id, "task_id": self.task_id}

    @contextmanager
    def call(self) -> Iterator[None]:
        """Count the call and time it; an error is counted by kind and re-raised."""
        started = time.perf_counter()
        try:
            yield
        except Exception as exc:
            kind = error_kind(exc)
            self._send("incr", "errors", 1, extra_tags={"kind": kind}, name_suffix=kind)
            raise
        finally:
            self._send("incr", "calls", 1)
            self._send("timing", "duration", (time.perf_counter() - started) * 1000.0)

    def result(self, *, empty: bool, replayed: bool, rows: int | None = None) -> None:
        """Count what a call that returned gave: empty, replayed, rows claimed."""
        if empty:
            self._send("incr", "empty", 1)
        if replayed:
            self._send("incr", "replayed", 1)
        if rows:
            self._send("incr", "rows", rows)

    def _send(
        self,
        method: str,
        measure: str,
        amount: float,
        *,
        extra_tags: Mapping[str, str] | None = None,
        name_suffix: str | None = None,
    ) -> None:
        base = f"{PREFIX}.{self.primitive}.{measure}"
        per_table = ".".join(
            part
            for part in (base, name_suffix and name_part(name_suffix), name_part(self.table))
            if part
        )[:_NAME_LIMIT]
        tags: dict[str, Any] = {**self.tags, **(extra_tags or {})}
        try:
            stats = _stats()
            getattr(stats, method)(base, amount, tags=tags)
            getattr(stats, method)(per_table, amount)
        except Exception:  # a metric must never fail the primitive it measures
            log.warning("could not send the metric %s", base, exc_info=True)


def _stats() -> Any:
    """Airflow's ``Stats`` for the running line (imported late: the store layer has no Airflow)."""
    from airflow.providers.common.compat.sdk import Stats

    return Stats
