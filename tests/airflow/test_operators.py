"""Operator construction and template rendering, without a DAG run.

Rendering is checked on both the unmapped path (``render_template_fields``) and
the mapped one (a ``MappedOperator`` renders through the unmapped operator's
internal ``_do_render_template_fields``), under both values of the DAG's
``render_template_as_native_obj``.
"""

from __future__ import annotations

import datetime
import inspect
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import DAG, TaskGroup

import airflow_atomic_store
from airflow_atomic_store import (
    AtomicClaimOperator,
    AtomicStore,
    AtomicUpdateOperator,
    AtomicUpsertOperator,
)
from airflow_atomic_store.operators import ClaimedRowsOperator
from airflow_atomic_store.templating import AtomicNamespace

START = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)
GUARD = [{"field": "claimedBy", "operator": "equals", "value": "{{ atomic.execution_id }}"}]


def make_dag(native: bool = False, **kwargs: Any) -> DAG:
    return DAG(
        "rendering",
        schedule=None,
        start_date=START,
        render_template_as_native_obj=native,
        params={"batch": 25},
        **kwargs,
    )


def task_context(dag: DAG, *, map_index: int = -1, conf: dict | None = None) -> dict[str, Any]:
    dag_run = SimpleNamespace(dag_id=dag.dag_id, run_id="manual__1", conf=conf or {})
    return {
        "dag": dag,
        "dag_run": dag_run,
        "run_id": dag_run.run_id,
        "params": {"batch": 25},
        "ti": SimpleNamespace(map_index=map_index, task=None),
    }


@pytest.fixture(params=[False, True], ids=["string-dag", "native-dag"])
def native(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def test_every_spec_argument_is_a_template_field() -> None:
    assert set(AtomicUpdateOperator.template_fields) >= {
        "table",
        "key",
        "where",
        "match",
        "mutations",
        "return_fields",
    }
    assert set(AtomicClaimOperator.template_fields) >= {
        "table",
        "where",
        "match",
        "mutations",
        "order_by",
        "direction",
        "limit",
        "return_fields",
    }
    assert set(AtomicUpsertOperator.template_fields) >= {
        "table",
        "key",
        "insert_value",
        "mutations",
        "return_fields",
    }
    for name in ("where", "mutations", "insert_value", "return_fields"):
        assert AtomicUpdateOperator.template_fields_renderers[name] == "json"


def test_constructors_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        AtomicUpdateOperator("t", "k", [])  # type: ignore[call-arg, arg-type]


def test_operators_are_importable_from_every_documented_path() -> None:
    from airflow_atomic_store import operators
    from airflow_atomic_store.hooks import AtomicStoreHook

    for name in ("AtomicUpdateOperator", "AtomicClaimOperator", "AtomicUpsertOperator"):
        assert getattr(airflow_atomic_store, name) is getattr(operators, name)
    assert airflow_atomic_store.AtomicStoreHook is AtomicStoreHook


@pytest.mark.parametrize(
    ("operator", "verb"),
    [
        (AtomicUpdateOperator, "atomic_update"),
        (AtomicClaimOperator, "atomic_claim"),
        (AtomicUpsertOperator, "atomic_upsert"),
    ],
)
def test_an_operators_defaults_are_the_stores(operator: type, verb: str) -> None:
    """The store declares each default once; an operator argument it shares takes it."""
    store_parameters = inspect.signature(getattr(AtomicStore, verb)).parameters
    shared = [
        parameter
        for name, parameter in inspect.signature(operator.__init__).parameters.items()
        if name in store_parameters and parameter.default is not parameter.empty
    ]
    assert shared
    for parameter in shared:
        assert parameter.default == store_parameters[parameter.name].default, parameter.name


def test_defaults_follow_the_spec() -> None:
    claim = AtomicClaimOperator(task_id="drain", table="pending_ops")
    assert (claim.conn_id, claim.where, claim.match, claim.mutations) == (
        "atomic_store_default",
        None,
        "all",
        None,
    )
    assert (claim.order_by, claim.direction, claim.limit) == ("createdAt", "asc", 10)
    assert claim.short_circuit is False and claim.return_fields is None
    upsert = AtomicUpsertOperator(task_id="seed", table="t", key="k", insert_value={})
    assert upsert.mutations == ()


def test_unmapped_rendering_keeps_lone_expressions_native(native: bool) -> None:
    with make_dag(native) as dag:
        op = AtomicClaimOperator(
            task_id="drain",
            table="queue-{{ dag_run.conf['queue'] }}",
            where=[
                {"field": "claimedAt", "operator": "lt", "value": "{{ atomic.ago(minutes=5) }}"},
                {"field": "size", "operator": "lte", "value": "{{ dag_run.conf['size'] }}"},
                {"field": "code", "operator": "equals", "value": "{{ dag_run.conf['code'] }}"},
            ],
            mutations=[
                {"field": "claimedAt", "operation": "set", "value": "{{ atomic.now }}"},
                {"field": "claimedBy", "operation": "set", "value": "{{ atomic.execution_id }}"},
                {"field": "tags", "operation": "set", "value": "{{ dag_run.conf['tags'] }}"},
            ],
            limit="{{ params.batch }}",  # type: ignore[arg-type]
        )
    context = task_context(dag, conf={"queue": 7, "size": 3, "code": "007", "tags": ["a", "b"]})
    op.render_template_fields(context)  # type: ignore[arg-type]
    atomic = context["atomic"]
    assert isinstance(atomic, AtomicNamespace)
    assert op.table == "queue-7"
    assert op.limit == 25
    assert op.where == [
        {"field": "claimedAt", "operator": "lt", "value": atomic.ago(minutes=5)},
        {"field": "size", "operator": "lte", "value": 3},
        {"field": "code", "operator": "equals", "value": "007"},
    ]
    assert op.mutations == [
        {"field": "claimedAt", "operation": "set", "value": atomic.now},
        {"field": "claimedBy", "operation": "set", "value": "rendering/manual__1"},
        {"field": "tags", "operation": "set", "value": ["a", "b"]},
    ]


def test_all_fields_of_one_task_see_the_same_instant() -> None:
    with make_dag() as dag:
        op = AtomicUpsertOperator(
            task_id="seed",
            table="t",
            key="{{ atomic.now }}",
            insert_value={"at": "{{ atomic.now }}", "later": "{{ atomic.now }}"},
        )
    op.render_template_fields(task_context(dag))  # type: ignore[arg-type]
    assert op.key == op.insert_value["at"] == op.insert_value["later"]


def test_mapped_rendering_gets_the_namespace_and_native_values(native: bool) -> None:
    with make_dag(native) as dag:
        mapped = AtomicUpdateOperator.partial(
            task_id="mark_done",
            table="pending_ops",
            where=GUARD,
            mutations=[{"field": "attempts", "operation": "increment", "value": "{{ 1 }}"}],
        ).expand(key=["op-1", "op-2", "op-3"])
    context = task_context(dag, map_index=1)
    mapped.render_template_fields(context)  # type: ignore[arg-type]
    unmapped = context["task"]
    assert isinstance(unmapped, AtomicUpdateOperator)
    assert unmapped.key == "op-2"
    assert unmapped.where == [
        {"field": "claimedBy", "operator": "equals", "value": "rendering/manual__1"}
    ]
    assert unmapped.mutations == [{"field": "attempts", "operation": "increment", "value": 1}]


def test_claimed_adds_one_republishing_task_after_the_claim() -> None:
    with make_dag():
        drain = AtomicClaimOperator(task_id="drain", table="pending_ops")
        rows, keys = drain.claimed, drain.claimed_keys
    assert rows.operator is keys.arg.operator  # type: ignore[attr-defined]
    helper = rows.operator  # type: ignore[attr-defined]
    assert isinstance(helper, ClaimedRowsOperator)
    assert helper.task_id == "drain_claimed"
    assert helper.upstream_task_ids == {"drain"}
    assert [t.task_id for t in drain.downstream_list] == ["drain_claimed"]


def test_claimed_inside_a_task_group_stays_in_the_group() -> None:
    with make_dag(), TaskGroup("dispatch"):
        drain = AtomicClaimOperator(task_id="drain", table="pending_ops")
        helper = drain.claimed.operator  # type: ignore[attr-defined]
    assert drain.task_id == "dispatch.drain"
    assert helper.task_id == "dispatch.drain_claimed"


def test_claimed_needs_a_dag() -> None:
    drain = AtomicClaimOperator(task_id="drain", table="pending_ops")
    with pytest.raises(RuntimeError, match="add the claim to a DAG"):
        _ = drain.claimed


def test_only_a_short_circuiting_operator_can_skip_downstream_tasks() -> None:
    assert AtomicClaimOperator(task_id="a", table="t", short_circuit=True).inherits_from_skipmixin
    assert not AtomicClaimOperator(task_id="b", table="t").inherits_from_skipmixin


@pytest.mark.parametrize(
    ("field", "template"),
    [
        ("where", "{{ dag_run.conf.get('guard') }}"),
        ("mutations", "{{ dag_run.conf.get('mutations', '') }}"),
        ("return_fields", "{{ dag_run.conf.get('fields') }}"),
        ("idempotency_key", "{{ dag_run.conf.get('key') }}"),
        ("table", "{% if dag_run.conf.get('table') %}t{% endif %}"),
    ],
)
def test_a_field_rendered_to_nothing_is_a_spec_error_on_both_rendering_paths(
    field: str, template: str
) -> None:
    from airflow_atomic_store.compat import AirflowFailException
    from airflow_atomic_store.exceptions import SpecError

    spec = {"table": "t", "mutations": [{"field": "n", "operation": "set", "value": 1}]}
    with make_dag() as dag:
        unmapped = AtomicUpdateOperator(task_id="take", key="k", **{**spec, field: template})
        mapped = AtomicUpdateOperator.partial(task_id="mark", **{**spec, field: template}).expand(
            key=["k"]
        )
    for op in (unmapped, mapped):
        with pytest.raises(AirflowFailException, match=f"invalid spec: {field}: the template"):
            op.render_template_fields(task_context(dag, map_index=0))  # type: ignore[arg-type]
        with pytest.raises(AirflowFailException) as failure:
            op.render_template_fields(task_context(dag, map_index=0))  # type: ignore[arg-type]
        assert isinstance(failure.value.__cause__, SpecError)
        assert failure.value.__cause__.field == field


def test_literal_none_and_empty_fields_stay_empty_and_nested_values_may_render_to_none() -> None:
    with make_dag() as dag:
        op = AtomicUpdateOperator(
            task_id="take",
            table="t",
            key="k",
            where=None,
            return_fields=[],
            mutations=[
                {"field": "note", "operation": "set", "value": "{{ dag_run.conf.get('n') }}"}
            ],
        )
    op.render_template_fields(task_context(dag))  # type: ignore[arg-type]
    assert (op.where, op.return_fields) == (None, [])
    assert op.mutations == [{"field": "note", "operation": "set", "value": None}]


def test_an_undefined_variable_is_a_final_failure_naming_the_field() -> None:
    from airflow_atomic_store.compat import AirflowFailException

    with make_dag() as dag:
        op = AtomicUpsertOperator(
            task_id="seed", table="t", key="{{ dag_run.conf['missing'] }}", insert_value={}
        )
    with pytest.raises(AirflowFailException, match="seed: template error: key: UndefinedError"):
        op.render_template_fields(task_context(dag))  # type: ignore[arg-type]


#: The template fields that keep a lone ``{{ … }}``'s native value (JSON values, a number).
NATIVE_FIELDS = {"where", "mutations", "insert_value", "return_fields", "limit"}


@pytest.mark.parametrize(
    "operator", [AtomicUpdateOperator, AtomicClaimOperator, AtomicUpsertOperator]
)
def test_every_template_field_renders_either_as_text_or_natively(operator: type) -> None:
    """A new template field must say which it is: text-only fields never keep native values."""
    fields = set(operator.template_fields)
    assert fields <= operator.text_fields | NATIVE_FIELDS
    assert not operator.text_fields & NATIVE_FIELDS


NUMBERS = {"event_id": 42, "shard": 7, "version": 1.5, "conn": 3}


def test_text_fields_render_a_lone_number_as_its_text_and_values_stay_native(
    native: bool,
) -> None:
    with make_dag(native) as dag:
        op = AtomicUpsertOperator(
            task_id="seed",
            conn_id="store_{{ dag_run.conf['conn'] }}",
            table="{{ dag_run.conf['shard'] }}",
            key="{{ dag_run.conf['version'] }}",
            idempotency_key="{{ dag_run.conf['event_id'] }}",
            insert_value={"event": "{{ dag_run.conf['event_id'] }}"},
            mutations=[
                {"field": "v", "operation": "set", "value": "{{ dag_run.conf['version'] }}"}
            ],
        )
    op.render_template_fields(task_context(dag, conf=NUMBERS))  # type: ignore[arg-type]
    assert (op.conn_id, op.table, op.key, op.idempotency_key) == ("store_3", "7", "1.5", "42")
    assert op.insert_value == {"event": 42}
    assert op.mutations == [{"field": "v", "operation": "set", "value": 1.5}]


def test_text_fields_of_a_mapped_task_render_as_text_too(native: bool) -> None:
    with make_dag(native) as dag:
        mapped = AtomicUpdateOperator.partial(
            task_id="mark_done",
            table="{{ dag_run.conf['shard'] }}",
            idempotency_key="{{ dag_run.conf['event_id'] }}",
            mutations=[{"field": "n", "operation": "set", "value": "{{ dag_run.conf['shard'] }}"}],
        ).expand(key=["{{ dag_run.conf['version'] }}", "{{ dag_run.conf['event_id'] }}"])
    context = task_context(dag, map_index=1, conf=NUMBERS)
    mapped.render_template_fields(context)  # type: ignore[arg-type]
    unmapped = context["task"]
    assert (unmapped.table, unmapped.key, unmapped.idempotency_key) == ("7", "42", "42")
    assert unmapped.mutations == [{"field": "n", "operation": "set", "value": 7}]


def test_claim_options_render_as_text_and_the_limit_stays_a_number(native: bool) -> None:
    with make_dag(native) as dag:
        op = AtomicClaimOperator(
            task_id="drain",
            table="{{ dag_run.conf['shard'] }}",
            match="{{ dag_run.conf['match'] }}",
            order_by="{{ dag_run.conf['order'] }}",
            direction="{{ dag_run.conf['direction'] }}",
            limit="{{ params.batch }}",  # type: ignore[arg-type]
            idempotency_key="{{ dag_run.conf['event_id'] }}",
        )
    conf = {**NUMBERS, "match": "any", "order": "recordTimestamp", "direction": "desc"}
    op.render_template_fields(task_context(dag, conf=conf))  # type: ignore[arg-type]
    assert (op.table, op.match, op.order_by, op.direction) == (
        "7",
        "any",
        "recordTimestamp",
        "desc",
    )
    assert (op.limit, op.idempotency_key) == (25, "42")


def test_a_datetime_in_a_text_field_renders_as_airflow_would_render_it() -> None:
    moment = datetime.datetime(2025, 1, 31, 9, 30, tzinfo=datetime.timezone.utc)
    with make_dag() as dag:
        op = AtomicUpsertOperator(
            task_id="seed", table="t", key="{{ dag_run.conf['at'] }}", insert_value={}
        )
    op.render_template_fields(task_context(dag, conf={"at": moment}))  # type: ignore[arg-type]
    assert op.key == str(moment)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("idempotency_key", True),
        ("key", ["a", "b"]),
        ("table", {"name": "t"}),
        ("match", False),
        ("conn_id", b"store"),
    ],
)
def test_a_text_field_rendered_to_a_value_without_text_is_a_spec_error_naming_it(
    field: str, value: Any
) -> None:
    """Its str() would be a surprise ("True", "['a', 'b']"): fail at once instead."""
    from airflow_atomic_store.compat import AirflowFailException
    from airflow_atomic_store.exceptions import SpecError

    spec = {"table": "t", "key": "k", "mutations": [{"field": "n", "operation": "set", "value": 1}]}
    with make_dag() as dag:
        op = AtomicUpdateOperator(task_id="take", **{**spec, field: "{{ dag_run.conf['value'] }}"})
    with pytest.raises(AirflowFailException, match=f"invalid spec: {field}: ") as failure:
        op.render_template_fields(task_context(dag, conf={"value": value}))  # type: ignore[arg-type]
    assert isinstance(failure.value.__cause__, SpecError)
    assert failure.value.__cause__.field == field
