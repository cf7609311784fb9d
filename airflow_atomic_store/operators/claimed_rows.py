"""``ClaimedRowsOperator``: a claim's rows as a return value ``.expand()`` can map over."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class ClaimedRowsOperator(BaseOperator):
    """Return a claim's ``claimed`` rows as this task's own return value.

    Airflow can only map over a whole return value; this task is what
    :attr:`AtomicClaimOperator.claimed` adds so that the rows can be mapped over.

    :param claim_task_id: task id of the claim.
    :param claim_result: the claim's result dict (usually ``claim.output``; templated).
    """

    template_fields: Sequence[str] = ("claim_result",)
    ui_color = "#ebf5fb"

    def __init__(self, *, claim_task_id: str, claim_result: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.claim_task_id = claim_task_id
        self.claim_result = claim_result

    def execute(self, context: Context) -> list[dict[str, Any]]:
        result = self.claim_result or {}
        rows = list(result.get("claimed") or ())
        self.log.info("passing on %d row(s) claimed by %s", len(rows), self.claim_task_id)
        return rows


def own_task_id(task: BaseOperator) -> str:
    """The task id without its task group's prefix (the group adds it back)."""
    group = task.task_group
    prefix = f"{group.group_id}." if group is not None and group.group_id else ""
    if prefix and group is not None and group.prefix_group_id:
        return task.task_id.removeprefix(prefix)
    return task.task_id
