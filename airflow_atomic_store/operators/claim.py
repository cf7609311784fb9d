"""``AtomicClaimOperator``: drain up to ``limit`` matching rows, marking them claimed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from airflow.sdk import XComArg

from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.hooks.atomic_store import AtomicStoreHook
from airflow_atomic_store.operators.base import BaseAtomicOperator, store_defaults
from airflow_atomic_store.operators.claimed_rows import ClaimedRowsOperator, own_task_id
from airflow_atomic_store.operators.waiting import Wait, parse_wait_timeout
from airflow_atomic_store.spec.watch import parse_seconds
from airflow_atomic_store.templating import AtomicNamespace

_DEFAULTS = store_defaults("atomic_claim")

if TYPE_CHECKING:
    from airflow_atomic_store.triggers.claim_wait import ClaimWaitTrigger


class AtomicClaimOperator(BaseAtomicOperator):
    """Claim up to ``limit`` rows matching ``where``, marking them in the same step.

    Two claims running at once never get the same row. The result, pushed as the
    ``return_value`` XCom, is ``{"claimed": [{"key": ..., "value": ...}], "count": n}``
    in claim order (FIFO by default). An empty queue gives ``count`` 0, not an error.

    Without ``mutations`` each claimed row gets ``status`` → ``"in_flight"``,
    ``claimedAt`` → now (a canonical timestamp, so stale claims can be recovered) and
    ``claimedBy`` → ``atomic.execution_id`` (``"{dag_id}/{run_id}"``).

    **Mapping over the claimed rows.** Airflow maps only over a task's whole return
    value, so ``.expand()`` cannot use ``drain.output["claimed"]``. Use
    :attr:`claimed` (the list of ``{key, value}`` rows) or :attr:`claimed_keys` (their
    keys) instead: the first use adds a tiny task ``<task_id>_claimed`` right after
    the claim that republishes the rows as its own return value. One mapped task
    instance runs per claimed row (none when nothing was claimed)::

        drain = AtomicClaimOperator(
            task_id="drain",
            table="pending_ops",
            where=[{"field": "status", "operator": "equals", "value": "pending"}],
            limit=10,
        )

        @task
        def process(row: dict) -> None: ...

        process.expand(row=drain.claimed)

        AtomicUpdateOperator.partial(
            task_id="mark_done",
            table="pending_ops",
            where=[{"field": "claimedBy", "operator": "equals",
                    "value": "{{ atomic.execution_id }}"}],
            mutations=[{"field": "status", "operation": "set", "value": "done"}],
        ).expand(key=drain.claimed_keys)

    In templates, the rows are ``{{ ti.xcom_pull(task_ids='drain')['claimed'] }}``.

    Both go through ``<task_id>_claimed``, whose XCom is a second copy of the batch in
    Airflow's metadata DB (and a task mapped over rows keeps up to ``[core]
    max_templated_field_length`` characters of its row in its rendered fields). For
    large values, map over keys and read each row from the store, as the queue recipes
    do (docs/recipes/queue-dispatcher.md, "Keeping payloads small").

    :param table: the queue's logical table (templated).
    :param where: conditions ``{field, operator, value}`` selecting claimable rows;
        none means every row (templated).
    :param match: ``"all"`` (AND) or ``"any"`` (OR) to combine the conditions (templated).
    :param mutations: ``{field, operation, value}`` mutations marking each claimed row;
        ``None`` uses the default claim mutation above (templated).
    :param order_by: ``"createdAt"`` or ``"recordTimestamp"`` (templated).
    :param direction: ``"asc"`` or ``"desc"`` (templated).
    :param limit: at most this many rows, 1 to 1000 (templated: a lone ``{{ … }}``
        renders to its native type, so ``"{{ params.batch_size }}"`` gives an int).
    :param return_fields: keep only these top-level fields of each value (templated).
    :param mode: ``"mark"`` (the default: the claim mutation marks rows in place,
        at-least-once with stale-claim recovery) or ``"delete"`` (rows are removed by the
        claim and returned with their last value: at-most-once, a task that dies after
        the claim has lost its batch; takes no ``mutations``) (templated).
    :param conn_id: connection id of the store (templated).
    :param short_circuit: skip every downstream task when nothing was claimed.
    :param deferrable: when nothing is claimable, wait in the triggerer (no worker slot)
        until a row matching ``where`` appears, then claim. Needs a running triggerer.
    :param wait_timeout: with ``deferrable``, how long to wait (a ``timedelta`` or
        seconds; None waits for ever). When it passes, the task claims once more and
        returns what it got, usually the empty result (and short-circuits if asked).
        With an idempotency key (the default) a wait lasts at most a third of the
        store's ``receipt_retention`` (2 days 8 hours by default; see below).
    :param poll_interval: with ``deferrable``, seconds between the waiting trigger's
        counts (on PostgreSQL it also wakes at once on the store's writes).

    A waiting trigger counts with the ``where`` as rendered when the task deferred.
    When a template read the clock (``claimedAt lt {{ atomic.ago(minutes=5) }}``, the
    stale-claim pass), rows start to match by the clock alone, so the wait ends every
    minute (``RERENDER_SECONDS``) and the task renders, claims, and waits again.

    **Deferral and idempotency.** The wait is part of one logical claim: the task
    instance's idempotency key still makes it claim at most once, however often Airflow
    runs it. Each claim attempt that found nothing is recorded under its own round
    (``<key>``, ``<key>/wait-1``, ``<key>/wait-2``…); a retried task replays the rounds
    that found nothing without waiting again, and stops at the round that claimed
    (replaying its batch) or at the first round not yet run (claiming live). So the
    rounds' receipts must outlive the wait: a keyed wait ends, as if timed out, after a
    third of the store's ``receipt_retention``, and a retry has the rest to replay.
    """

    primitive = "claim"
    template_fields: Sequence[str] = (
        "conn_id",
        "table",
        "where",
        "match",
        "mutations",
        "order_by",
        "direction",
        "limit",
        "return_fields",
        "idempotency_key",
        "mode",
    )

    def __init__(
        self,
        *,
        where: Sequence[Mapping[str, Any]] | None = _DEFAULTS["where"],
        match: str = _DEFAULTS["match"],
        mutations: Sequence[Mapping[str, Any]] | None = _DEFAULTS["mutations"],
        order_by: str = _DEFAULTS["order_by"],
        direction: str = _DEFAULTS["direction"],
        limit: int | str = _DEFAULTS["limit"],
        mode: str = _DEFAULTS["mode"],
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
        self.where = where
        self.match = match
        self.mutations = mutations
        self.order_by = order_by
        self.direction = direction
        self.limit = limit
        self.mode = mode

    def run_primitive(
        self, hook: AtomicStoreHook, atomic: AtomicNamespace, idempotency_key: str | None
    ) -> dict[str, Any]:
        if not self.deferrable:
            return self._claim(hook, atomic, idempotency_key)
        wait = Wait(self.wait_timeout, *self._resumed)  # a fresh one per run of the task
        return wait.attempt(
            self,
            idempotency_key,
            lambda key: self._claim(hook, atomic, key),
            lambda result: bool(result["count"]),
            receipt_retention=hook.store.receipt_retention,
            read_clock=atomic.read_clock,
            waiting_for=f"nothing to claim from {self.table}",
        )

    def _claim(
        self, hook: AtomicStoreHook, atomic: AtomicNamespace, idempotency_key: str | None
    ) -> dict[str, Any]:
        return hook.atomic_claim(
            self.table,
            where=self.where,
            match=self.match,
            mutations=self.mutations,
            order_by=self.order_by,
            direction=self.direction,
            limit=cast("int", self.limit),  # rendered by now; the store checks its type
            return_fields=self.return_fields,
            execution_id=atomic.execution_id,
            idempotency_key=idempotency_key,
            mode=self.mode,
        )

    # -- deferral ---------------------------------------------------------------------------

    def wait_trigger(self, *, deadline: str | None, rerender_at: str | None) -> ClaimWaitTrigger:
        """Wait in the triggerer for rows matching the rendered ``where``."""
        from airflow_atomic_store.triggers.claim_wait import ClaimWaitTrigger

        return ClaimWaitTrigger(
            conn_id=self.conn_id,
            table=self.table,
            where=self.where,
            match=self.match,
            poll_interval=self.poll_interval,
            deadline=deadline,
            rerender_at=rerender_at,
        )

    def describe(self, result: Mapping[str, Any]) -> str:
        return f"claimed {result['count']} of limit {self.limit} from {self.table}"

    def is_empty(self, result: Mapping[str, Any]) -> bool:
        return not result["count"]

    def rows_in(self, result: Mapping[str, Any]) -> int | None:
        return int(result["count"])

    @property
    def claimed(self) -> XComArg:
        """The claimed ``{key, value}`` rows, as a reference ``.expand()`` can map over."""
        return XComArg(self._claimed_rows_task())

    @property
    def claimed_keys(self) -> XComArg:
        """The claimed rows' keys, as a reference ``.expand()`` can map over."""
        return self.claimed.map(row_key)

    def _claimed_rows_task(self) -> ClaimedRowsOperator:
        if not self.has_dag():
            raise RuntimeError(
                f"{self.task_id}: add the claim to a DAG before using .claimed or .claimed_keys"
            )
        for task in self.downstream_list:
            if isinstance(task, ClaimedRowsOperator) and task.claim_task_id == self.task_id:
                return task
        rows = ClaimedRowsOperator(
            task_id=f"{own_task_id(self)}_claimed",
            claim_task_id=self.task_id,
            claim_result=self.output,
            dag=self.dag,
            task_group=self.task_group,
        )
        self >> rows
        return rows


def row_key(row: Mapping[str, Any]) -> Any:
    """The key of a claimed ``{key, value}`` row."""
    return row["key"]
