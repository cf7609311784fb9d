"""``AtomicUpdateOperator``: compare-and-swap on one row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.hooks.atomic_store import AtomicStoreHook
from airflow_atomic_store.operators.base import BaseAtomicOperator, store_defaults
from airflow_atomic_store.operators.waiting import Wait, parse_wait_timeout
from airflow_atomic_store.spec.watch import parse_seconds
from airflow_atomic_store.templating import AtomicNamespace

if TYPE_CHECKING:
    from airflow_atomic_store.triggers.row_wait import RowWaitTrigger

_DEFAULTS = store_defaults("atomic_update")


class AtomicUpdateOperator(BaseAtomicOperator):
    """Conditionally mutate one row, identified by key, in one atomic step.

    ``where`` is the compare-and-swap guard: the mutations apply only if all (or,
    with ``match="any"``, any) of its conditions hold for the row's current value.
    The row is never created: seed it with :class:`AtomicUpsertOperator` first.

    The result, pushed as the ``return_value`` XCom, is
    ``{"updated": bool, "value": dict | None, "key": str}``: ``value`` is the new value
    when updated, else ``None``. A missing row or a failed guard is not an error;
    branch on ``updated``, or set ``short_circuit=True`` to skip every downstream task
    when nothing was updated. Token bucket, one token per run::

        take_token = AtomicUpdateOperator(
            task_id="take_token",
            table="rate_limits",
            key="external-api",
            where=[{"field": "tokens", "operator": "gt", "value": 0}],
            mutations=[{"field": "tokens", "operation": "increment", "value": -1}],
            short_circuit=True,
        )

    :param table: the logical table (templated).
    :param key: the row's key (templated).
    :param mutations: ``{field, operation, value}`` mutations applied in order when the
        guard matches; ``operation`` is ``set`` or ``increment`` (templated).
    :param where: guard conditions ``{field, operator, value}`` on the current value;
        none means "the row exists" (templated).
    :param match: ``"all"`` (AND) or ``"any"`` (OR) to combine the guard's conditions
        (templated).
    :param return_fields: keep only these top-level fields of ``value`` (templated).
    :param conn_id: connection id of the store (templated).
    :param short_circuit: skip every downstream task when ``updated`` is false.
    :param deferrable: when the row is missing or the guard does not hold, wait in the
        triggerer (no worker slot) until the row changes so that it might, then try
        again. Needs a running triggerer.
    :param wait_timeout: with ``deferrable``, how long to wait (a ``timedelta`` or
        seconds; None waits for ever). When it passes, the task tries once more and
        returns what it got, usually ``updated: false`` (and short-circuits if asked).
        With an idempotency key (the default) a wait lasts at most a third of the
        store's ``receipt_retention``.
    :param poll_interval: with ``deferrable``, seconds between the trigger's reads of
        the row (on PostgreSQL it also wakes at once on the table's writes).

    A guard that reads the clock (``expiresAt lte {{ atomic.now }}``: a lease that
    expires) comes true with no write at all, so such a wait ends every minute for the
    task to render it again and try. The idempotency key spans the wait: each attempt
    is its own round (``<key>``, ``<key>/wait-1``…), so a retried task replays the
    rounds it ran and applies at most once (``operators/waiting.py``).
    """

    primitive = "update"
    template_fields: Sequence[str] = (
        "conn_id",
        "table",
        "key",
        "where",
        "match",
        "mutations",
        "return_fields",
        "idempotency_key",
    )

    def __init__(
        self,
        *,
        key: str,
        mutations: Sequence[Mapping[str, Any]],
        where: Sequence[Mapping[str, Any]] | None = _DEFAULTS["where"],
        match: str = _DEFAULTS["match"],
        deferrable: bool = False,
        wait_timeout: timedelta | float | None = None,
        poll_interval: float = 2.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(deferrable, bool):
            raise SpecError("deferrable", f"must be true or false, got {deferrable!r}")
        self.deferrable = deferrable
        self.wait_timeout = parse_wait_timeout(wait_timeout)
        self.poll_interval = parse_seconds(poll_interval, "poll_interval")
        self.key = key
        self.mutations = mutations
        self.where = where
        self.match = match

    def run_primitive(
        self, hook: AtomicStoreHook, atomic: AtomicNamespace, idempotency_key: str | None
    ) -> dict[str, Any]:
        if not self.deferrable:
            return self._update(hook, idempotency_key)
        wait = Wait(self.wait_timeout, *self._resumed)  # a fresh one per run of the task
        return wait.attempt(
            self,
            idempotency_key,
            lambda key: self._update(hook, key),
            lambda result: bool(result["updated"]),
            receipt_retention=hook.store.receipt_retention,
            read_clock=atomic.read_clock,
            waiting_for=f"did not update key {self.key!r} in {self.table}",
        )

    def wait_trigger(self, *, deadline: str | None, rerender_at: str | None) -> RowWaitTrigger:
        from airflow_atomic_store.triggers.row_wait import RowWaitTrigger

        return RowWaitTrigger(
            conn_id=self.conn_id,
            table=self.table,
            key=self.key,
            where=self.where,
            match=self.match,
            poll_interval=self.poll_interval,
            deadline=deadline,
            rerender_at=rerender_at,
        )

    def _update(self, hook: AtomicStoreHook, idempotency_key: str | None) -> dict[str, Any]:
        return hook.atomic_update(
            self.table,
            self.key,
            where=self.where,
            match=self.match,
            mutations=self.mutations,
            return_fields=self.return_fields,
            idempotency_key=idempotency_key,
        )

    def describe(self, result: Mapping[str, Any]) -> str:
        if result["updated"]:
            return f"updated key {result['key']!r} in {self.table}"
        return (
            f"did not update key {result['key']!r} in {self.table}: "
            "the row is missing or the guard did not match"
        )

    def is_empty(self, result: Mapping[str, Any]) -> bool:
        return not result["updated"]
