"""The ``atomic`` namespace and type-preserving rendering, without a DAG run."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import jinja2
import pytest
from airflow.sdk import DAG

from airflow_atomic_store.templating import (
    AtomicNamespace,
    ensure_namespace,
    execution_id,
    render_value,
)
from airflow_atomic_store.timestamps import parse_timestamp

CANONICAL = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
MOMENT = datetime(2025, 1, 31, 9, 30, 15, 123456, tzinfo=timezone.utc)


@pytest.fixture
def atomic() -> AtomicNamespace:
    return AtomicNamespace(execution_id="dag/run", moment=MOMENT)


def create_template_env(
    *, native: bool = False, user_defined_macros: dict[str, Any] | None = None
) -> jinja2.Environment:
    """The environment Airflow renders a DAG's templates in (every Airflow 3 line has this)."""
    dag = DAG(
        dag_id="templating",
        schedule=None,
        render_template_as_native_obj=native,
        user_defined_macros=user_defined_macros,
    )
    return dag.get_template_env()


@pytest.fixture(params=[False, True], ids=["string-env", "native-env"])
def env(request: pytest.FixtureRequest) -> jinja2.Environment:
    """Both environments Airflow may hand us: the DAG's render_template_as_native_obj decides."""
    return create_template_env(native=request.param)


def test_now_is_canonical_utc_with_microseconds(atomic: AtomicNamespace) -> None:
    assert atomic.now == "2025-01-31T09:30:15.123456Z"
    assert CANONICAL.match(AtomicNamespace(execution_id="x").now)


def test_now_of_a_fresh_namespace_is_the_current_time() -> None:
    before = datetime.now(timezone.utc)
    namespace = AtomicNamespace(execution_id="x")
    after = datetime.now(timezone.utc)
    assert before <= parse_timestamp(namespace.now) <= after


def test_ago_and_from_now_shift_by_any_timedelta_keywords(atomic: AtomicNamespace) -> None:
    assert atomic.ago(minutes=5) == "2025-01-31T09:25:15.123456Z"
    assert atomic.from_now(days=1, hours=2) == "2025-02-01T11:30:15.123456Z"
    assert atomic.ago(seconds=0.5) == "2025-01-31T09:30:14.623456Z"
    assert atomic.ago(weeks=1) < atomic.now < atomic.from_now(microseconds=1)


def test_ago_rejects_unknown_keywords(atomic: AtomicNamespace) -> None:
    with pytest.raises(TypeError):
        atomic.ago(fortnights=1)


def test_epoch_seconds_are_exact_to_the_microsecond(atomic: AtomicNamespace) -> None:
    assert atomic.epoch_seconds == MOMENT.timestamp() == 1738315815.123456
    assert atomic.epoch_seconds_from_now(seconds=1.5) == pytest.approx(1738315816.623456, abs=1e-6)
    assert atomic.epoch_seconds_ago(minutes=1) == pytest.approx(1738315755.123456, abs=1e-6)
    assert isinstance(atomic.epoch_seconds, float)


def test_the_namespace_is_frozen_at_one_instant(atomic: AtomicNamespace) -> None:
    assert atomic.now == atomic.now == atomic.ago(seconds=0) == atomic.from_now()
    assert atomic.epoch_seconds == parse_timestamp(atomic.now).timestamp()


@pytest.mark.parametrize(
    "template",
    [
        "{{ atomic.now }}",
        "{{ atomic.epoch_seconds }}",
        "{{ atomic.ago(minutes=5) }}",
        "before {{ atomic.from_now(hours=1) }}",
        "{{ atomic.epoch_seconds_ago(minutes=5) }}",
        "{{ atomic.epoch_seconds_from_now(seconds=1) }}",
    ],
)
def test_a_template_that_reads_the_clock_is_remembered(template: str) -> None:
    """A deferrable claim renders such a ``where`` again while it waits (operators/claim.py)."""
    atomic = AtomicNamespace(execution_id="dag/run", moment=MOMENT)
    render_value(create_template_env(), "{{ atomic.execution_id }}", {"atomic": atomic})
    assert atomic.read_clock is False
    render_value(create_template_env(), template, {"atomic": atomic})
    assert atomic.read_clock is True


def test_execution_id_is_dag_id_slash_run_id() -> None:
    context = {"dag_run": SimpleNamespace(dag_id="drain", run_id="manual__2025-01-31")}
    assert execution_id(context) == "drain/manual__2025-01-31"


def test_ensure_namespace_adds_one_namespace_per_context() -> None:
    context: dict = {"dag_run": SimpleNamespace(dag_id="d", run_id="r")}
    first = ensure_namespace(context)
    assert context["atomic"] is first is ensure_namespace(context)
    assert first.execution_id == "d/r"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{{ number }}", 5),
        ("{{ number + 0.5 }}", 5.5),
        ("{{ text }}", "5"),  # a string that looks like a number stays a string
        ("{{ items }}", [1, "two"]),
        ("{{ mapping }}", {"a": {"b": None}}),
        ("{{ flag }}", True),
        ("{{ nothing }}", None),
        ("{{ items | length }}", 2),
        ("{{ mapping.a }}", {"b": None}),
        ("{{ number }}\n", 5),  # Jinja drops one trailing newline, as Airflow does
    ],
)
def test_a_lone_expression_keeps_its_native_type(
    env: jinja2.Environment, source: str, expected: object
) -> None:
    context = {
        "number": 5,
        "text": "5",
        "items": [1, "two"],
        "mapping": {"a": {"b": None}},
        "flag": True,
        "nothing": None,
    }
    rendered = render_value(env, source, context)
    assert rendered == expected
    assert type(rendered) is type(expected)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("n={{ number }}", "n=5"),
        ("{{ number }}{{ number }}", "55"),
        (" {{ number }}", " 5"),
        ("{% if flag %}{{ number }}{% endif %}", "5"),
        ("{{ items }}!", "[1, 'two']!"),
        ("plain text", "plain text"),
    ],
)
def test_anything_but_a_lone_expression_renders_to_text(
    env: jinja2.Environment, source: str, expected: str
) -> None:
    context = {"number": 5, "items": [1, "two"], "flag": True}
    assert render_value(env, source, context) == expected


def test_an_undefined_name_fails_like_airflow_rendering(env: jinja2.Environment) -> None:
    with pytest.raises(jinja2.UndefinedError, match="missing"):
        render_value(env, "{{ missing }}", {})
    with pytest.raises(jinja2.UndefinedError, match="missing"):
        render_value(env, "key-{{ missing }}", {})


def test_the_sandbox_still_applies_to_lone_expressions() -> None:
    sandboxed = create_template_env(native=False)
    with pytest.raises(jinja2.exceptions.SecurityError):
        render_value(sandboxed, "{{ number.__class__ }}", {"number": 5})


def test_templates_can_use_the_namespace(env: jinja2.Environment, atomic: AtomicNamespace) -> None:
    context = {"atomic": atomic}
    assert render_value(env, "{{ atomic.now }}", context) == atomic.now
    assert (
        render_value(env, "{{ atomic.ago(minutes=5) }}", context) == "2025-01-31T09:25:15.123456Z"
    )
    assert render_value(env, "{{ atomic.epoch_seconds }}", context) == atomic.epoch_seconds
    assert render_value(env, "{{ atomic.epoch_seconds_from_now(seconds=10) }}", context) == (
        pytest.approx(atomic.epoch_seconds + 10)
    )
    assert render_value(env, "run {{ atomic.execution_id }}", context) == "run dag/run"


def test_context_values_win_over_user_defined_macros() -> None:
    env = create_template_env(user_defined_macros={"answer": 41, "macro_only": "m"})
    assert render_value(env, "{{ answer }}", {"answer": 42}) == 42
    assert render_value(env, "{{ macro_only }}", {}) == "m"


def test_shifts_by_timedelta_objects_match_the_keyword_form(atomic: AtomicNamespace) -> None:
    assert parse_timestamp(atomic.ago(hours=3)) == MOMENT - timedelta(hours=3)
