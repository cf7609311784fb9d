"""``AtomicUpsertOperator``: insert a row if absent, else mutate it, in one atomic step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_atomic_store.hooks.atomic_store import AtomicStoreHook
from airflow_atomic_store.operators.base import BaseAtomicOperator, store_defaults
from airflow_atomic_store.templating import AtomicNamespace

_DEFAULTS = store_defaults("atomic_upsert")


class AtomicUpsertOperator(BaseAtomicOperator):
    """Insert ``insert_value`` under ``key`` if the row is absent, else apply ``mutations``.

    With no mutations this is "seed if missing": the first caller inserts, every
    later caller sees the row and leaves it alone. The result, pushed as the
    ``return_value`` XCom, is ``{"inserted": bool, "value": dict, "key": str}``;
    ``inserted`` says which branch fired and ``value`` is the row's resulting value
    either way. Process each event once::

        first_delivery = AtomicUpsertOperator(
            task_id="first_delivery",
            table="processed_events",
            key="{{ dag_run.conf['event_id'] }}",
            insert_value={"claimedAt": "{{ atomic.now }}", "by": "{{ atomic.execution_id }}"},
            short_circuit=True,  # a duplicate delivery skips the work downstream
        )

    :param table: the logical table (templated).
    :param key: the row's key, the conflict target (templated).
    :param insert_value: the whole value (a JSON object) to insert when the row is
        absent (templated).
    :param mutations: ``{field, operation, value}`` mutations applied when the row
        already exists; empty leaves it unchanged (templated).
    :param return_fields: keep only these top-level fields of ``value`` (templated).
    :param conn_id: connection id of the store (templated).
    :param short_circuit: skip every downstream task when ``inserted`` is false.
    """

    primitive = "upsert"
    template_fields: Sequence[str] = (
        "conn_id",
        "table",
        "key",
        "insert_value",
        "mutations",
        "return_fields",
        "idempotency_key",
    )

    def __init__(
        self,
        *,
        key: str,
        insert_value: dict[str, Any],
        mutations: Sequence[Mapping[str, Any]] = _DEFAULTS["mutations"],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.key = key
        self.insert_value = insert_value
        self.mutations = mutations

    def run_primitive(
        self, hook: AtomicStoreHook, atomic: AtomicNamespace, idempotency_key: str | None
    ) -> dict[str, Any]:
        return hook.atomic_upsert(
            self.table,
            self.key,
            insert_value=self.insert_value,
            mutations=self.mutations or (),
            return_fields=self.return_fields,
            idempotency_key=idempotency_key,
        )

    def describe(self, result: Mapping[str, Any]) -> str:
        if result["inserted"]:
            return f"inserted key {result['key']!r} into {self.table}"
        count = len(self.mutations or ())
        if count:
            return f"key {result['key']!r} already in {self.table}: applied {count} mutation(s)"
        return f"key {result['key']!r} already in {self.table}: left unchanged"

    def is_empty(self, result: Mapping[str, Any]) -> bool:
        return not result["inserted"]
