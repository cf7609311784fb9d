"""How failures meet Airflow's retries in real DAG runs (both backends)."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta

import pytest

from airflow_atomic_store import (
    AtomicClaimOperator,
    AtomicStore,
    AtomicUpdateOperator,
    AtomicUpsertOperator,
)
from devkit.dagrun import DagRunResult, new_dag
from devkit.postgres_server import PostgresServer
from tests.support.specs import THREE_RETRIES as RETRYING

RunDag = Callable[..., DagRunResult]


def test_invalid_specs_and_impossible_mutations_fail_at_once_without_retries(
    run_dag: RunDag,
    store_conn: str,
    store_url: str,
    dag_id: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with AtomicStore(store_url) as store:
        store.put("rate_limits", "api", {"tokens": "plenty"})
    with new_dag(dag_id, default_args=RETRYING) as dag:
        AtomicUpdateOperator(
            task_id="unknown_operator",
            conn_id=store_conn,
            table="rate_limits",
            key="api",
            where=[{"field": "tokens", "operator": "greater", "value": 0}],
            mutations=[{"field": "tokens", "operation": "increment", "value": -1}],
        )
        AtomicClaimOperator(
            task_id="limit_too_large",
            conn_id=store_conn,
            table="pending_ops",
            limit="{{ 5000 }}",  # type: ignore[arg-type]
        )
        AtomicUpsertOperator(
            task_id="bad_path",
            conn_id=store_conn,
            table="leases",
            key="lease",
            insert_value={},
            mutations=[{"field": "holder..name", "operation": "set", "value": "x"}],
        )
        AtomicUpdateOperator(
            task_id="increment_a_string",
            conn_id=store_conn,
            table="rate_limits",
            key="api",
            mutations=[{"field": "tokens", "operation": "increment", "value": -1}],
        )

    run = run_dag(dag)
    logs = capsys.readouterr().out

    assert run.state == "failed"
    for task_id in ("unknown_operator", "limit_too_large", "bad_path", "increment_a_string"):
        assert run.state_of(task_id) == "failed", task_id
        assert run.try_number_of(task_id) == 1, task_id
    assert "unknown_operator: invalid spec: where[0].operator" in logs
    assert "limit_too_large: invalid spec: limit" in logs
    assert "bad_path: invalid spec: mutations[0].field" in logs
    assert "increment_a_string: mutation cannot apply: tokens" in logs
    with AtomicStore(store_url) as store:
        assert store.get("rate_limits", "api") == {"tokens": "plenty"}  # nothing was written


def test_a_store_outage_fails_normally_so_retries_apply(
    run_dag: RunDag,
    backend: str,
    tmp_path: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    dag_id: str,
) -> None:
    if backend == "postgres":
        unreachable = "postgresql://postgres@127.0.0.1:1/atomic_store"  # nothing listens on port 1
    else:
        not_a_database = tmp_path / "store.db"  # type: ignore[operator]
        not_a_database.write_text("this file is not a SQLite database" * 100)
        unreachable = f"sqlite:///{not_a_database}"
    monkeypatch.setenv("AIRFLOW_CONN_UNREACHABLE_STORE", unreachable)
    with new_dag(dag_id, default_args={"retries": 1, "retry_delay": timedelta(0)}) as dag:
        AtomicUpsertOperator(
            task_id="seed", conn_id="unreachable_store", table="t", key="k", insert_value={}
        )

    run = run_dag(dag)

    assert (run.state_of("seed"), run.try_number_of("seed")) == ("failed", 2)


def test_a_missing_connection_fails_the_task_with_instructions(
    run_dag: RunDag, dag_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with new_dag(dag_id) as dag:
        AtomicClaimOperator(task_id="drain", conn_id="never_defined", table="pending_ops")

    run = run_dag(dag)

    assert run.state_of("drain") == "failed"
    assert "AIRFLOW_CONN_NEVER_DEFINED='sqlite:////abs/path/store.db'" in capsys.readouterr().out


def test_a_template_rendering_a_field_to_nothing_fails_at_once_and_writes_nothing(
    run_dag: RunDag,
    store_conn: str,
    store_url: str,
    dag_id: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with AtomicStore(store_url) as store:
        store.put("rate_limits", "api", {"tokens": 5})
        store.put("rate_limits", "literal", {"tokens": 5})
        store.put("pending_ops", "op-1", {"status": "pending"})
    missing = "{{ dag_run.conf.get('guard') }}"  # no such key in the run's conf: None
    with new_dag(dag_id, default_args=RETRYING) as dag:
        AtomicUpdateOperator(
            task_id="guard_renders_none",
            conn_id=store_conn,
            table="rate_limits",
            key="api",
            where=missing,  # type: ignore[arg-type]
            mutations=[{"field": "tokens", "operation": "increment", "value": -1}],
        )
        AtomicUpdateOperator(
            task_id="guard_renders_blank",
            conn_id=store_conn,
            table="rate_limits",
            key="api",
            where="{{ dag_run.conf.get('guard', '') }}",  # type: ignore[arg-type]
            mutations=[{"field": "tokens", "operation": "increment", "value": -1}],
        )
        AtomicClaimOperator(
            task_id="mutations_render_none",
            conn_id=store_conn,
            table="pending_ops",
            mutations="{{ dag_run.conf.get('mark') }}",  # type: ignore[arg-type]
        )
        AtomicUpsertOperator(
            task_id="return_fields_render_none",
            conn_id=store_conn,
            table="rate_limits",
            key="api",
            insert_value={},
            mutations=[{"field": "tokens", "operation": "increment", "value": 1}],
            return_fields="{{ dag_run.conf.get('fields') }}",  # type: ignore[arg-type]
        )
        AtomicUpsertOperator(
            task_id="key_renders_blank",
            conn_id=store_conn,
            table="events",
            key="{% if dag_run.conf.get('event_id') %}{{ dag_run.conf.event_id }}{% endif %}",
            insert_value={"seen": True},
        )
        AtomicUpdateOperator(  # a literal None in the DAG is the one way to say "no guard"
            task_id="literal_no_guard",
            conn_id=store_conn,
            table="rate_limits",
            key="literal",
            where=None,
            mutations=[{"field": "tokens", "operation": "increment", "value": -1}],
        )

    run = run_dag(dag)
    logs = capsys.readouterr().out

    failed = {
        "guard_renders_none": "where",
        "guard_renders_blank": "where",
        "mutations_render_none": "mutations",
        "return_fields_render_none": "return_fields",
        "key_renders_blank": "key",
    }
    for task_id, field in failed.items():
        assert (run.state_of(task_id), run.try_number_of(task_id)) == ("failed", 1), task_id
        assert f"{task_id}: invalid spec: {field}: the template " in logs, task_id
    assert f"the template {missing!r} rendered to None" in logs
    assert run.state_of("literal_no_guard") == "success"
    with AtomicStore(store_url) as store:
        assert store.get("rate_limits", "api") == {"tokens": 5}  # never taken unguarded
        assert store.get("rate_limits", "literal") == {"tokens": 4}
        assert store.get("pending_ops", "op-1") == {"status": "pending"}
        assert store.query("events") == []


def test_an_undefined_template_variable_fails_at_once_naming_the_field(
    run_dag: RunDag,
    store_conn: str,
    store_url: str,
    dag_id: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with AtomicStore(store_url) as store:
        store.put("rate_limits", "api", {"tokens": 5})
    with new_dag(dag_id, default_args=RETRYING) as dag:
        AtomicUpdateOperator(
            task_id="undefined_in_where",
            conn_id=store_conn,
            table="rate_limits",
            key="api",
            where=[{"field": "tokens", "operator": "gt", "value": "{{ dag_run.conf['missing'] }}"}],
            mutations=[{"field": "tokens", "operation": "increment", "value": -1}],
        )
        AtomicUpsertOperator(
            task_id="undefined_key",
            conn_id=store_conn,
            table="events",
            key="event-{{ dag_run.conf['event_id'] }}",
            insert_value={},
        )
        AtomicClaimOperator(
            task_id="syntax_error_in_limit",
            conn_id=store_conn,
            table="pending_ops",
            limit="{{ params.batch ",  # type: ignore[arg-type]
        )
        AtomicUpdateOperator.partial(  # mapped instances render through another path
            task_id="undefined_in_mapped",
            conn_id=store_conn,
            table="rate_limits",
            mutations=[{"field": "{{ dag_run.conf['field'] }}", "operation": "set", "value": 1}],
        ).expand(key=["api"])

    run = run_dag(dag)
    logs = capsys.readouterr().out

    for task_id, field in {
        "undefined_in_where": "where",
        "undefined_key": "key",
        "syntax_error_in_limit": "limit",
    }.items():
        assert (run.state_of(task_id), run.try_number_of(task_id)) == ("failed", 1), task_id
        assert f"{task_id}: template error: {field}: " in logs, task_id
    assert (
        run.state_of("undefined_in_mapped", 0),
        run.try_number_of("undefined_in_mapped", 0),
    ) == (
        "failed",
        1,
    )
    assert "undefined_in_mapped: template error: mutations: UndefinedError" in logs
    assert "template error: key: UndefinedError" in logs
    assert "TemplateSyntaxError" in logs
    with AtomicStore(store_url) as store:
        assert store.get("rate_limits", "api") == {"tokens": 5}


@pytest.mark.postgres
def test_a_wrong_database_password_fails_at_once_without_showing_it(
    run_dag: RunDag,
    postgres_server: PostgresServer,
    monkeypatch: pytest.MonkeyPatch,
    dag_id: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    role = f"dag_auth_{os.getpid()}"
    postgres_server.create_user_schema(role)
    try:
        good = postgres_server.require_password(role, "the-right-one")
        monkeypatch.setenv(
            "AIRFLOW_CONN_WRONG_PASSWORD", good.replace("the-right-one", "NotThePassword42")
        )
        with new_dag(dag_id, default_args=RETRYING) as dag:
            AtomicUpsertOperator(
                task_id="seed", conn_id="wrong_password", table="t", key="k", insert_value={}
            )

        run = run_dag(dag)
    finally:
        postgres_server.drop_user_schema(role)
    logs = capsys.readouterr().out

    assert (run.state_of("seed"), run.try_number_of("seed")) == ("failed", 1)
    assert "seed: access denied: PostgreSQL store access denied: " in logs
    assert f'password authentication failed for user "{role}"' in logs
    assert "NotThePassword42" not in logs
