"""``@task.atomic_batch``: a TaskFlow task that processes a claimed batch, row by row.

Registered by the provider (``task-decorators`` in provider info), as common-sql
registers ``@task.sql``::

    @task.atomic_batch(table="pending_ops", where=[PENDING], limit=100)
    def send(row: dict) -> None:
        call_the_api(row["value"]["payload"])

    send()

The decorated function takes the row (``{"key", "value"}``) as its first
argument, and any context values it names, like a ``@task``; the task claims,
calls it per row and records each outcome (``operators/batch.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.common.compat.sdk import (
    DecoratedOperator,
    determine_kwargs,
    task_decorator_factory,
)

from airflow_atomic_store.operators.batch import AtomicBatchOperator

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import TaskDecorator
    from airflow.sdk import Context


class _AtomicBatchDecoratedOperator(DecoratedOperator, AtomicBatchOperator):
    custom_operator_name: ClassVar[str] = "@task.atomic_batch"
    template_fields: Sequence[str] = (
        *DecoratedOperator.template_fields,
        *AtomicBatchOperator.template_fields,
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {
        **DecoratedOperator.template_fields_renderers,
        **AtomicBatchOperator.template_fields_renderers,
    }

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        # The row is the function's first argument, given per row at run time: the
        # signature check of the decorator sees the function without it.
        super().__init__(
            python_callable=functools.partial(python_callable, None),
            op_args=op_args,
            op_kwargs=op_kwargs,
            process_row=python_callable,
            **kwargs,
        )

    def row_kwargs(self, row: Mapping[str, Any], context: Context) -> Mapping[str, Any]:
        return determine_kwargs(
            self.process_row, [row, *self.op_args], {**context, **self.op_kwargs}
        )

    def execute(self, context: Context) -> Any:
        return AtomicBatchOperator.execute(self, context)


def atomic_batch_task(
    python_callable: Callable[..., Any] | None = None, **kwargs: Any
) -> TaskDecorator:
    """``@task.atomic_batch(table=…, where=…, limit=…, mode="mark", conn_id=…)``."""
    return task_decorator_factory(
        python_callable=python_callable,
        decorated_operator_class=_AtomicBatchDecoratedOperator,
        **kwargs,
    )
