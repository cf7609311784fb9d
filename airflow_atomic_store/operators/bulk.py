"""``AtomicUpsertManyOperator`` and ``AtomicUpdateManyOperator``: many rows in one step.

A producer that enqueues a list of items, and a task that finishes a claimed batch,
make one call instead of one per row (``AtomicStore.atomic_upsert_many`` and
``atomic_update_many``): one statement on PostgreSQL, one transaction on SQLite.
Like every atomic operator, each task instance acts once however often Airflow runs
it: a retry replays the first try's result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from airflow_atomic_store.hooks.atomic_store import AtomicStoreHook
from airflow_atomic_store.operators.base import BaseAtomicOperator, store_defaults
from airflow_atomic_store.templating import AtomicNamespace

_UPDATE_DEFAULTS = store_defaults("atomic_update_many")


class AtomicUpsertManyOperator(BaseAtomicOperator):
    """Upsert a list of items in one atomic step: enqueue many, seed-if-missing.

    Each item is ``{"key", "insert_value"[, "mutations"]}`` (up to 10,000, keys
    distinct): an absent row gets its ``insert_value``, a present one its
    ``mutations`` or, without any, nothing, so a producer run twice adds no item twice.
    The rows of one call are claimed in the order given. The result, pushed as the
    ``return_value`` XCom, is ``{"items": [{"key", "inserted"}, …], "inserted": n}``::

        enqueue = AtomicUpsertManyOperator(
            task_id="enqueue",
            table="pending_ops",
            items="{{ ti.xcom_pull(task_ids='build_items') }}",  # a list, rendered natively
        )

    :param table: the logical table (templated).
    :param items: the items, a list or a template rendering to one (templated).
    :param conn_id: connection id of the store (templated).
    :param short_circuit: skip every downstream task when nothing was inserted.
    """

    primitive = "upsert_many"
    template_fields: Sequence[str] = ("conn_id", "table", "items", "idempotency_key")
    template_fields_renderers: ClassVar[dict[str, str]] = {"items": "json"}

    def __init__(self, *, items: Sequence[Any] | str, **kwargs: Any) -> None:
        _no_return_fields(kwargs)
        super().__init__(**kwargs)
        self.items = items

    def run_primitive(
        self, hook: AtomicStoreHook, atomic: AtomicNamespace, idempotency_key: str | None
    ) -> dict[str, Any]:
        return hook.atomic_upsert_many(
            self.table,
            self.items,  # rendered by now; the store checks it
            idempotency_key=idempotency_key,
        )

    def describe(self, result: Mapping[str, Any]) -> str:
        given = len(result["items"])
        return f"inserted {result['inserted']} of {given} item(s) into {self.table}"

    def is_empty(self, result: Mapping[str, Any]) -> bool:
        return not result["inserted"]

    def rows_in(self, result: Mapping[str, Any]) -> int | None:
        return int(result["inserted"])


class AtomicUpdateManyOperator(BaseAtomicOperator):
    """Apply the same mutations to many rows in one atomic step, each row's guard on its own.

    What finishes a claimed batch: the rows this DAG run still holds become ``done``,
    a row another run took over meanwhile is left alone::

        finish = AtomicUpdateManyOperator(
            task_id="finish",
            table="pending_ops",
            keys="{{ ti.xcom_pull(task_ids='drain_keys') }}",
            where=[{"field": "claimedBy", "operator": "equals", "value": "{{ atomic.execution_id }}"}],
            mutations=[
                {"field": "status", "operation": "set", "value": "done"},
                {"field": "finishedAt", "operation": "set", "value": "{{ atomic.now }}"},
            ],
        )

    The result, pushed as the ``return_value`` XCom, is ``{"items": [{"key",
    "updated"}, …], "updated": n}``.

    :param table: the logical table (templated).
    :param keys: the rows' keys, up to 10,000 (templated).
    :param mutations: applied to each row whose guard holds (templated).
    :param where: the guard, judged on each row's current value (templated).
    :param match: ``"all"`` or ``"any"`` (templated).
    :param archive_table: move the updated rows there, with their new value, in the
        same statement (pgmq's ``archive``) (templated).
    :param conn_id: connection id of the store (templated).
    :param short_circuit: skip every downstream task when no row was updated.
    """

    primitive = "update_many"
    template_fields: Sequence[str] = (
        "conn_id",
        "table",
        "keys",
        "where",
        "match",
        "mutations",
        "archive_table",
        "idempotency_key",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {
        "keys": "json",
        "where": "json",
        "mutations": "json",
    }
    text_fields: ClassVar[frozenset[str]] = BaseAtomicOperator.text_fields | {"archive_table"}

    def __init__(
        self,
        *,
        keys: Sequence[str] | str,
        mutations: Sequence[Mapping[str, Any]],
        where: Sequence[Mapping[str, Any]] | None = _UPDATE_DEFAULTS["where"],
        match: str = _UPDATE_DEFAULTS["match"],
        archive_table: str | None = None,
        **kwargs: Any,
    ) -> None:
        _no_return_fields(kwargs)
        super().__init__(**kwargs)
        self.keys = keys
        self.mutations = mutations
        self.where = where
        self.match = match
        self.archive_table = archive_table

    def run_primitive(
        self, hook: AtomicStoreHook, atomic: AtomicNamespace, idempotency_key: str | None
    ) -> dict[str, Any]:
        return hook.atomic_update_many(
            self.table,
            self.keys,  # rendered by now; the store checks it
            where=self.where,
            match=self.match,
            mutations=self.mutations,
            idempotency_key=idempotency_key,
            archive_table=self.archive_table,
        )

    def describe(self, result: Mapping[str, Any]) -> str:
        moved = f" (moved to {self.archive_table})" if self.archive_table else ""
        return (
            f"updated {result['updated']} of {len(result['items'])} row(s) in {self.table}{moved}"
        )

    def is_empty(self, result: Mapping[str, Any]) -> bool:
        return not result["updated"]

    def rows_in(self, result: Mapping[str, Any]) -> int | None:
        return int(result["updated"])


def _no_return_fields(kwargs: dict[str, Any]) -> None:
    """The many-rows results carry no values to trim: refused when the DAG is parsed."""
    if kwargs.get("return_fields") is not None:
        raise TypeError("the many-rows operators return no values: return_fields does not apply")
