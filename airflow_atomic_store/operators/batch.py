"""``AtomicBatchOperator``: claim a batch, run a function per row, record each row's outcome.

What ``@task.atomic_batch`` runs (``decorators/atomic_batch.py``). A mapped recipe
runs a task instance per claimed row: two per row in the UI, and a run over 100
rows is 200 task instances. This runs one task for the whole batch, calling the
function once per row so that each row gets its own outcome:

* the claim is keyed by the task instance, as the operators' are: a retried task
  replays its batch;
* each row's outcome is written to the row itself, guarded on ``claimedBy`` (the
  DAG run) and ``status: in_flight``: ``done`` with ``finishedAt`` (what
  ``retire`` reads), or ``failed`` with the ``error`` and ``finishedAt`` (the
  dead-letter list). A row another run took over (stale-claim recovery) is left
  alone. Done rows are written together, one ``atomic_update_many`` for up to 100
  of them (and at least every 5 seconds), not one update per row;
* one failing row fails neither the others nor the task; a retried task skips
  the rows its earlier tries finished;
* the result counts the batch's rows by outcome.

With ``mode="delete"`` the rows leave the table when claimed; their outcomes go to
``outcomes_table`` (keyed ``<task instance key>/<row key>``), which a retry reads to
skip them; a failed row's outcome keeps its value, since the queue no longer does.
Per row, calling the function is at least once (a try that dies between the call
and the outcome's write calls it again, for the rows finished since the last group
was written): keep the recipes' process-once guard around side effects.

A delete-claim cannot be undone, so everything the batch will need is checked
before it (:class:`_Outcomes`): the mode, the tables, the outcomes table, the
prefix of the outcome keys, and whether the function can be called with a row and
the context values it names. An outcome key is bounded by construction, never by a
failure after the claim: when ``<prefix>/<row key>`` would be longer than a key
may be (1,024 bytes), the row key is replaced by its digest (``sha256:<hex>``),
and the prefix too if it is still too long; the same row always gets the same
key, so a retry finds it, and the outcome's ``row`` holds the whole row key.
"""

from __future__ import annotations

import hashlib
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from airflow.providers.common.compat.sdk import determine_kwargs

from airflow_atomic_store import timestamps
from airflow_atomic_store.exceptions import SpecError
from airflow_atomic_store.hooks.atomic_store import AtomicStoreHook
from airflow_atomic_store.operators.base import BaseAtomicOperator, store_defaults
from airflow_atomic_store.spec import check_text, parse_table
from airflow_atomic_store.spec.options import MAX_KEY_BYTES, MAX_TABLE_BYTES, parse_claim_mode
from airflow_atomic_store.templating import AtomicNamespace

if TYPE_CHECKING:
    from airflow.sdk import Context

_DEFAULTS = store_defaults("atomic_claim")
#: How much of a row's error message its outcome keeps.
ERROR_CHARS = 2000
#: Finished rows recorded in one call at most, and the longest they wait for it.
FLUSH_ROWS = 100
FLUSH_SECONDS = 5.0
_FINISHED = ("done", "failed")
#: A stand-in for the row when the function's signature is checked before the claim.
_ANY_ROW: Mapping[str, Any] = MappingProxyType({"key": "", "value": {}})


class AtomicBatchOperator(BaseAtomicOperator):
    """Claim up to ``limit`` rows and call ``process_row(row)`` for each, recording outcomes.

    ``row`` is ``{"key": …, "value": …}``. The result is ``{"claimed": n, "done": d,
    "failed": f, "skipped": s}``: ``done`` and ``failed`` count the batch's rows by
    outcome, this try's and earlier tries' alike; ``skipped`` the rows another run
    took over before this one finished them.

    :param process_row: called once per claimed row (and, like a ``@task``, with the
        context values its signature names, and ``atomic_store``: the task's open
        :class:`AtomicStoreHook`, so a row's own writes, such as a process-once guard,
        share the batch's connection instead of opening one per row).
    :param table: the queue's table (templated).
    :param where: conditions selecting claimable rows (templated).
    :param limit: at most this many rows, 1 to 1000 (templated).
    :param mode: ``"mark"`` (outcomes on the rows) or ``"delete"`` (templated).
    :param outcomes_table: with ``mode="delete"``, where outcomes go (templated);
        default ``<table>_outcomes``. Checked before the claim like every argument:
        an empty name, the queue's own table, or a default name longer than a table
        name may be is a ``SpecError`` with nothing claimed. A mark-mode batch keeps
        outcomes on its rows and does not use it.
    """

    primitive = "claim"
    template_fields: Sequence[str] = (
        "conn_id",
        "table",
        "where",
        "match",
        "limit",
        "mode",
        "outcomes_table",
        "idempotency_key",
    )

    def __init__(
        self,
        *,
        process_row: Callable[..., Any],
        where: Sequence[Mapping[str, Any]] | None = _DEFAULTS["where"],
        match: str = _DEFAULTS["match"],
        limit: int | str = _DEFAULTS["limit"],
        mode: str = _DEFAULTS["mode"],
        outcomes_table: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.process_row = process_row
        self.where = where
        self.match = match
        self.limit = limit
        self.mode = mode
        self.outcomes_table = outcomes_table

    def run_primitive(
        self, hook: AtomicStoreHook, atomic: AtomicNamespace, idempotency_key: str | None
    ) -> dict[str, Any]:
        # Before the claim: a delete-claim's rows exist only in its receipt after it.
        outcomes = _Outcomes(hook, self, atomic.execution_id, idempotency_key)
        context = cast("Context", {**self._context, "atomic_store": hook})
        kwargs = self._row_call_kwargs(context)
        claimed = hook.atomic_claim(
            self.table,
            where=self.where,
            match=self.match,
            limit=cast("int", self.limit),  # rendered by now; the store checks its type
            mode=self.mode,
            execution_id=atomic.execution_id,
            idempotency_key=idempotency_key,
        )
        # A fresh claim (not a replay) has no row an earlier try finished: no lookups.
        outcomes.replayed = bool(claimed.get("replayed"))
        for row in claimed["claimed"]:
            if not outcomes.recorded(row):
                outcomes.record(row, self._call(row, kwargs))
        outcomes.flush()
        return {"claimed": claimed["count"], **outcomes.counts}

    def _row_call_kwargs(self, context: Context) -> Mapping[str, Any]:
        """The keyword arguments of every row's call, worked out once, before the claim.

        The row is only ever the first positional argument, so they are the same for
        each row. A function that cannot take them (a parameter named like a context
        value where the row goes, a required parameter nothing gives) fails the task
        here with nothing claimed, instead of failing every row of a deleted batch.
        """
        try:
            kwargs = self.row_kwargs(_ANY_ROW, context)
            inspect.signature(self.process_row).bind(_ANY_ROW, **kwargs)
        except (TypeError, ValueError) as exc:
            raise SpecError(
                "process_row", f"cannot be called as process_row(row, **context): {exc}"
            ) from exc
        return kwargs

    def _call(self, row: dict[str, Any], kwargs: Mapping[str, Any]) -> str | None:
        """Run the function on one row: None when it returned, else its error."""
        try:
            self.process_row(row, **kwargs)
        except Exception as exc:  # one row's failure is that row's outcome, not the task's
            self.log.warning("row %r failed: %s", row["key"], exc)
            return f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]
        return None

    def row_kwargs(self, row: Mapping[str, Any], context: Context) -> Mapping[str, Any]:
        """The keyword arguments ``process_row`` takes besides the row: the context
        values (``atomic_store`` among them) its signature names."""
        return determine_kwargs(self.process_row, [row], context)

    def execute(self, context: Context) -> dict[str, Any]:
        self._context = context
        return super().execute(context)

    def describe(self, result: Mapping[str, Any]) -> str:
        return (
            f"claimed {result['claimed']} from {self.table}: {result['done']} done, "
            f"{result['failed']} failed, {result['skipped']} taken over by another run"
        )

    def is_empty(self, result: Mapping[str, Any]) -> bool:
        return not result["claimed"]

    def rows_in(self, result: Mapping[str, Any]) -> int | None:
        return int(result["claimed"])


class _Outcomes:
    """Where one batch's outcomes are recorded: on the rows, or in the outcomes table.

    Made before the claim, from the operator's rendered arguments: every check that
    could fail is made here, so that none can fail after a delete-claim committed.

    Finished rows are written a group at a time (one ``atomic_update_many``, or one
    ``atomic_upsert_many`` of outcomes), at the end of the batch and every
    :data:`FLUSH_ROWS` rows or :data:`FLUSH_SECONDS`, whichever comes first: a try that
    dies calls the function again for at most those rows (the recipes' process-once
    guard covers their side effects). A failed row's outcome, with its own error, is
    written on the row at once.
    """

    def __init__(
        self, hook: AtomicStoreHook, operator: AtomicBatchOperator, owner: str, key: str | None
    ) -> None:
        self._hook, self._owner = hook, owner
        self._table = parse_table(operator.table)
        self._deleting = parse_claim_mode(operator.mode) == "delete"
        given = operator.outcomes_table
        # A mark-mode batch keeps outcomes on its rows; a name it was given is still checked.
        needed = self._deleting or given is not None
        self._outcomes = _outcomes_table(self._table, given) if needed else ""
        self._prefix = key or owner
        check_text(self._prefix, "idempotency_key" if key else "execution_id", "outcome keys")
        #: whether the claim replayed an earlier try's batch (set once it is made)
        self.replayed = True
        self._done: list[str] = []  # mark mode: rows finished since the last flush
        self._items: list[dict[str, Any]] = []  # delete mode: outcomes since then
        self._flushed_at = time.monotonic()
        self.counts = {"done": 0, "failed": 0, "skipped": 0}

    def key(self, row: Mapping[str, Any]) -> str:
        return outcome_key(self._prefix, row["key"])

    def recorded(self, row: Mapping[str, Any]) -> bool:
        """Count the row's outcome if an earlier try finished it ("skipped": another run's
        now). Only a replayed batch can have such rows: a fresh one is not looked up."""
        if not self.replayed:
            return False
        if self._deleting:
            value = self._hook.get(self._outcomes, self.key(row))
            outcome = None if value is None else str(value.get("status"))
        else:
            value = self._hook.get(self._table, row["key"])
            if value is None or value.get("claimedBy") != self._owner:
                outcome = "skipped"
            else:
                status = value.get("status")
                outcome = str(status) if status in _FINISHED else None
        if outcome is not None:
            self.counts[outcome] += 1
        return outcome is not None

    def record(self, row: Mapping[str, Any], error: str | None) -> None:
        status = "done" if error is None else "failed"
        fields = {"status": status, "finishedAt": timestamps.now()}
        if error is not None:
            fields["error"] = error
        if self._deleting:
            # The row is gone from the queue: a failed one keeps its value here, so the
            # dead-letter list can be re-queued (a mark-mode row keeps it on itself).
            kept = {} if error is None else {"value": row["value"]}
            value = {"row": row["key"], **fields, **kept}
            self._items.append({"key": self.key(row), "insert_value": value})
            self.counts[status] += 1
        elif error is None:
            self._done.append(row["key"])
        else:
            failed = self._hook.atomic_update(
                self._table, row["key"], where=self._still_ours(), mutations=_sets(fields)
            )
            self.counts["failed" if failed["updated"] else "skipped"] += 1
        if len(self._done) + len(self._items) >= FLUSH_ROWS or (
            time.monotonic() - self._flushed_at >= FLUSH_SECONDS
        ):
            self.flush()

    def flush(self) -> None:
        """Write the rows finished since the last flush, in one call."""
        if self._items:
            self._hook.atomic_upsert_many(self._outcomes, self._items)
        if self._done:
            finished = self._hook.atomic_update_many(
                self._table,
                self._done,
                where=self._still_ours(),
                mutations=_sets({"status": "done", "finishedAt": timestamps.now()}),
            )
            self.counts["done"] += finished["updated"]
            self.counts["skipped"] += len(self._done) - finished["updated"]
        self._done, self._items = [], []
        self._flushed_at = time.monotonic()

    def _still_ours(self) -> list[dict[str, Any]]:
        """A row another run took over (stale-claim recovery) is left alone."""
        return [
            {"field": "claimedBy", "operator": "equals", "value": self._owner},
            {"field": "status", "operator": "equals", "value": "in_flight"},
        ]


def _sets(fields: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"field": name, "operation": "set", "value": value} for name, value in fields.items()]


def _outcomes_table(table: str, given: object) -> str:
    """The outcomes table: the given one (never ``""`` for the default) or ``<table>_outcomes``."""
    if given is None:
        name = f"{table}_outcomes"
        if len(name.encode()) > MAX_TABLE_BYTES:
            raise SpecError(
                "outcomes_table",
                f"the default {name[:40]!r}… would be longer than a table name may be "
                f"({MAX_TABLE_BYTES} bytes): give outcomes_table",
            )
        return name
    name = parse_table(given, "outcomes_table")
    if name == table:
        raise SpecError("outcomes_table", "must not be the queue's own table")
    return name


def outcome_key(prefix: str, row_key: str) -> str:
    """A delete-mode row's outcome key: ``<prefix>/<row key>`` when it fits in a key.

    Otherwise the row key, then the prefix too, give way to their digests, so the
    key is always at most ``MAX_KEY_BYTES`` (about 150 bytes at worst) and always the
    same for the same row and prefix: a retry reads the outcome an earlier try wrote.
    """
    readable = f"{prefix}/{row_key}"
    if len(readable.encode()) <= MAX_KEY_BYTES:
        return readable
    row_part = _digest(row_key)
    shorter = f"{prefix}/{row_part}"
    if len(shorter.encode()) <= MAX_KEY_BYTES:
        return shorter
    return f"{_digest(prefix)}/{row_part}"


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
