"""The ``atomic`` template namespace and type-preserving rendering of spec values.

Templates in the atomic operators see Airflow's usual context plus ``atomic``:

``{{ atomic.now }}``
    the current UTC time as a canonical timestamp (``2025-01-31T09:30:00.000000Z``).
    Canonical timestamps compare correctly as strings, so guards such as
    ``claimedAt lt {{ atomic.ago(minutes=5) }}`` work on every backend.
``{{ atomic.ago(minutes=5) }}`` / ``{{ atomic.from_now(hours=1) }}``
    a canonical timestamp relative to ``atomic.now``; any ``datetime.timedelta``
    keywords (``days``, ``hours``, ``minutes``, ``seconds``, ``microseconds``...).
``{{ atomic.epoch_seconds }}``
    ``atomic.now`` as seconds since the Unix epoch (a float, microsecond precision),
    for numeric time arithmetic: ``increment`` a ``nextSlotAt`` by an interval, or
    guard ``nextSlotAt lte {{ atomic.epoch_seconds }}``.
``{{ atomic.epoch_seconds_ago(minutes=5) }}`` / ``{{ atomic.epoch_seconds_from_now(...) }}``
    the same, relative to now.
``{{ atomic.execution_id }}``
    ``"{dag_id}/{run_id}"``: the same for every task (and every mapped task) of one
    DAG run, so a per-row update can guard on the ``claimedBy`` its claim wrote.

The namespace is created once per task execution and frozen: every reference to
``atomic.now`` in one task renders the same instant. It remembers whether any
template read the clock (``read_clock``): a deferrable claim whose templates did
renders them again while it waits, since rows cross a time cutoff by the clock,
not by a write (``operators/claim.py``).

A template value that is exactly one ``{{ … }}`` expression keeps the native type
of the expression (a number stays a number, a list a list, a string a string, even
one that looks like a number), whatever the DAG's ``render_template_as_native_obj``
says. Anything else (text around the expression, several expressions, blocks)
renders to a string. A field that can only hold text (a table, a key…) takes the
rendered value's text instead (:func:`as_text`), as Airflow's own rendering gives it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any, Final
from uuid import UUID

import jinja2
from jinja2 import nodes

from airflow_atomic_store import timestamps
from airflow_atomic_store.exceptions import SpecError

__all__ = [
    "NAMESPACE",
    "AtomicNamespace",
    "as_text",
    "ensure_namespace",
    "execution_id",
    "render_value",
]

NAMESPACE = "atomic"
"""The name under which templates see an :class:`AtomicNamespace`."""

_RESULT = "__atomic_store_result"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: Rendered values whose ``str()`` is a sensible text field (a date includes datetimes).
#: ``bool`` is an ``int`` but is refused: ``"True"`` as a key or table is a slip.
_TEXT_TYPES: Final = (str, int, float, Decimal, UUID, date, time)


def execution_id(context: Mapping[str, Any]) -> str:
    """Return ``"{dag_id}/{run_id}"`` for the DAG run of a task context.

    Use it in a ``@task`` (``execution_id(get_current_context())``) to guard on the
    ``claimedBy`` that an :class:`~airflow_atomic_store.operators.AtomicClaimOperator`
    of the same DAG run wrote.
    """
    dag_run = context["dag_run"]
    return f"{dag_run.dag_id}/{dag_run.run_id}"


def task_instance_key(context: Mapping[str, Any], step: str | None = None) -> str:
    """``"{dag_id}/{run_id}/{task_id}/{map_index}"``: one idempotency key per task instance.

    The operators use it by default; a ``@task`` calling the hook passes it as
    ``idempotency_key`` (with a ``step`` name for each of its calls) so that
    Airflow's retries of that task instance replay instead of applying again.
    It never includes the try number.
    """
    ti, dag_run = context["ti"], context["dag_run"]
    key = f"{dag_run.dag_id}/{dag_run.run_id}/{ti.task_id}/{ti.map_index}"
    return key if step is None else f"{key}/{step}"


class AtomicNamespace:
    """What ``{{ atomic.… }}`` offers, frozen at one instant (see the module docstring)."""

    def __init__(self, *, execution_id: str, moment: datetime | None = None) -> None:
        moment = moment or timestamps.utc_now()
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        self._moment = moment
        self._now = timestamps.format_timestamp(moment)
        self.execution_id = execution_id
        #: Whether anything asked for the time (``now``, ``ago``, ``epoch_seconds``…).
        self.read_clock = False

    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> AtomicNamespace:
        return cls(execution_id=execution_id(context))

    @property
    def now(self) -> str:
        """The task execution's instant as a canonical timestamp."""
        self.read_clock = True
        return self._now

    @property
    def epoch_seconds(self) -> float:
        """The task execution's instant as seconds since the Unix epoch."""
        self.read_clock = True
        return _epoch_seconds(self._moment)

    def ago(self, **delta: float) -> str:
        """Canonical timestamp ``timedelta(**delta)`` before now."""
        return timestamps.format_timestamp(self._shifted(-timedelta(**delta)))

    def from_now(self, **delta: float) -> str:
        """Canonical timestamp ``timedelta(**delta)`` after now."""
        return timestamps.format_timestamp(self._shifted(timedelta(**delta)))

    def epoch_seconds_ago(self, **delta: float) -> float:
        """Epoch seconds ``timedelta(**delta)`` before now."""
        return _epoch_seconds(self._shifted(-timedelta(**delta)))

    def epoch_seconds_from_now(self, **delta: float) -> float:
        """Epoch seconds ``timedelta(**delta)`` after now."""
        return _epoch_seconds(self._shifted(timedelta(**delta)))

    def _shifted(self, delta: timedelta) -> datetime:
        self.read_clock = True
        return self._moment + delta

    def __repr__(self) -> str:
        return f"AtomicNamespace(now={self._now!r}, execution_id={self.execution_id!r})"


def _epoch_seconds(moment: datetime) -> float:
    # Exact to the microsecond: integer arithmetic, one division at the end.
    delta = moment - _EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return micros / 1_000_000


def ensure_namespace(context: MutableMapping[str, Any]) -> AtomicNamespace:
    """Put an :class:`AtomicNamespace` into ``context`` (once) and return it.

    The task context is shared by every template field of one task execution and
    by ``execute()``, so all of them see the same ``atomic.now``.
    """
    namespace = context.get(NAMESPACE)
    if not isinstance(namespace, AtomicNamespace):
        namespace = AtomicNamespace.from_context(context)
        context[NAMESPACE] = namespace
    return namespace


def render_value(env: jinja2.Environment, source: str, context: Mapping[str, Any]) -> Any:
    """Render one template string.

    A lone ``{{ expression }}`` returns the expression's value unchanged; any other
    template returns text. The environment is used as given (sandboxed or native),
    so its globals, filters and undefined-handling apply.
    """
    expression = _lone_expression(env.parse(source))
    if expression is None:
        template = env.from_string(source)
        return "".join(str(chunk) for chunk in _run(template, context))
    # Evaluate the expression the way ``Environment.compile_expression`` does: assign
    # it to a template variable and read the variable back, never through str().
    program = nodes.Template(
        [nodes.Assign(nodes.Name(_RESULT, "store", lineno=1), expression, lineno=1)], lineno=1
    )
    program.set_environment(env)
    template = env.from_string(program)
    variables: dict[str, Any] = {}
    for _ in _run(template, context, variables):
        pass
    value = variables[_RESULT]
    if isinstance(value, jinja2.Undefined):
        return str(value)  # raises for StrictUndefined (Airflow's default), "" otherwise
    return value


def as_text(rendered: Any, field: str) -> Any:
    """The text of a text-only field's rendered value: its ``str()``, as Airflow renders it.

    A lone ``{{ … }}`` keeps its native value, but a table, key or idempotency key
    can only be text: ``{{ dag_run.conf['event_id'] }}`` with ``42`` must give ``"42"``,
    as it would in any other operator. ``None`` (and an undefined value) stay as they
    are, so that a field rendered to nothing is refused rather than becoming
    ``"None"``. A bool, list, dict or other object has no sensible text (its ``str()``
    would be a surprise): a :class:`SpecError` naming the field.
    """
    if rendered is None or isinstance(rendered, (str, jinja2.Undefined)):
        return rendered
    if isinstance(rendered, bool) or not isinstance(rendered, _TEXT_TYPES):
        raise SpecError(
            field,
            f"must be text, but its template rendered to the {type(rendered).__name__} "
            f"{rendered!r}; render text explicitly (e.g. with the '| string' filter) "
            "if that is what you mean",
        )
    return str(rendered)


def _lone_expression(tree: nodes.Template) -> nodes.Expr | None:
    if len(tree.body) != 1 or not isinstance(tree.body[0], nodes.Output):
        return None
    parts = tree.body[0].nodes
    if len(parts) != 1 or isinstance(parts[0], nodes.TemplateData):
        return None
    return parts[0]


def _run(
    template: jinja2.Template,
    context: Mapping[str, Any],
    exported: dict[str, Any] | None = None,
) -> Iterator[Any]:
    """Yield the template's output chunks; copy its top-level variables into ``exported``."""
    # Like airflow.sdk.definitions.context.render_template: the context's own keys
    # win over the environment's globals (user_defined_macros).
    variables = dict(context)
    for name, value in template.globals.items():
        variables.setdefault(name, value)
    env = template.environment
    frame = env.context_class(env, variables, template.name, template.blocks)
    try:
        yield from template.root_render_func(frame)
    except Exception:
        env.handle_exception()  # rewrites the traceback to point into the template
    if exported is not None:
        exported.update(frame.vars)
