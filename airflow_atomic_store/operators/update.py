"""``AtomicUpdateOperator``: compare-and-swap on one row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_atomic_store.hooks.atomic_store import AtomicStoreHook
from airflow_atomic_store.operators.base import BaseAtomicOperator, store_defaults
from airflow_atomic_store.templating import AtomicNamespace

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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.key = key
        self.mutations = mutations
        self.where = where
        self.match = match

    def run_primitive(
        self, hook: AtomicStoreHook, atomic: AtomicNamespace, idempotency_key: str | None
    ) -> dict[str, Any]:
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
