"""The compatibility module: the moved names are Airflow's own, and old Airflow is refused.

These run on every Airflow line of the compatibility matrix (``make compat``), so
each assertion holds on 3.0, 3.1, 3.2 and 3.3 alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from airflow_atomic_store import compat
from devkit.dagrun import DagRunResult, new_dag
from devkit.postgres_server import PostgresServer


@pytest.mark.parametrize("version", ["3.0.0", "3.0.6", "3.1.8", "3.3.2", "3.1.0rc1", "4.0.0.dev0"])
def test_the_version_check_accepts_every_airflow_3_release(version: str) -> None:
    compat.check_airflow_version(version)


@pytest.mark.parametrize("version", ["2.11.2", "2.10.5", "2.99.0rc1", "1"])
def test_the_version_check_refuses_airflow_before_3_naming_the_minimum(version: str) -> None:
    with pytest.raises(RuntimeError, match=r"needs Apache Airflow 3\.0\.0\+") as raised:
        compat.check_airflow_version(version)
    assert version in str(raised.value)
    assert "airflow-atomic-store" in str(raised.value)


def test_the_version_check_rejects_text_that_is_not_a_version() -> None:
    with pytest.raises(ValueError, match="not a version"):
        compat.check_airflow_version("three")


@pytest.mark.parametrize("version", ["6.8.0", "6.8.0.dev0", "7.1.1"])
def test_the_postgres_provider_check_accepts_providers_with_create_connection(
    version: str,
) -> None:
    compat.check_postgres_provider_version(version)


@pytest.mark.parametrize("version", ["6.0.0", "6.2.0", "6.7.0", "6.7.9"])
def test_the_postgres_provider_check_refuses_providers_the_hook_cannot_use(version: str) -> None:
    """Before 6.8.0 the provider has no ``_create_connection``, which the hook overrides."""
    with pytest.raises(
        RuntimeError, match=r"apache-airflow-providers-postgres 6\.8\.0\+"
    ) as raised:
        compat.check_postgres_provider_version(version)
    assert version in str(raised.value)


def test_the_installed_postgres_provider_passes_the_check() -> None:
    from airflow.providers.postgres import __version__

    compat.check_postgres_provider_version(__version__)
    assert compat.PostgresHook is not None


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        check=False,
    )


def test_an_older_airflow_is_refused_when_the_airflow_layer_is_imported() -> None:
    result = _run(
        """
        import airflow
        airflow.__version__ = "2.11.2"
        for name in ("airflow_atomic_store.hooks", "airflow_atomic_store.operators"):
            try:
                __import__(name)
            except RuntimeError as exc:
                print(name, "refused:", exc)
            else:
                print(name, "imported")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("refused: The package `airflow-atomic-store` needs") == 2, (
        result.stdout
    )
    assert "Apache Airflow 3.0.0+; Apache Airflow 2.11.2 is installed" in result.stdout


def test_importing_the_package_under_airflow_2_is_refused_without_importing_airflow(
    tmp_path: Path,
) -> None:
    """Airflow 2's metadata first on the path: the package refuses at import, as
    Airflow's own providers do, before any Airflow module is loaded."""
    info = tmp_path / "apache_airflow-2.11.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: apache-airflow\nVersion: 2.11.2\n")
    code = textwrap.dedent(
        """
        import sys
        try:
            import airflow_atomic_store
        except RuntimeError as exc:
            print("refused:", exc)
        print("airflow imported:", "airflow" in sys.modules)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()])},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "refused: The package `airflow-atomic-store` needs Apache Airflow 3.0.0+; "
        "Apache Airflow 2.11.2 is installed"
    ) in result.stdout
    assert "airflow imported: False" in result.stdout


def test_an_older_postgres_provider_is_refused_when_the_postgres_hook_is_loaded() -> None:
    result = _run(
        """
        import airflow.providers.postgres as provider
        provider.__version__ = "6.7.0"
        from airflow_atomic_store import compat
        try:
            compat.PostgresHook
        except RuntimeError as exc:
            print("refused:", exc)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "refused: The package `airflow-atomic-store` needs" in result.stdout
    assert "apache-airflow-providers-postgres 6.8.0+; 6.7.0 is installed" in result.stdout


def test_the_store_and_spec_layers_import_without_airflow() -> None:
    result = _run(
        """
        import sys
        import airflow_atomic_store
        import airflow_atomic_store.spec
        import airflow_atomic_store.store
        from airflow_atomic_store import AtomicStore, SpecError
        print(sorted(name for name in sys.modules if name.split(".")[0] == "airflow"))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_airflow_layer_takes_the_moved_names_from_common_compat_as_airflow_providers_do() -> (
    None
):
    from airflow.providers.common.compat import sdk
    from airflow.providers.common.compat.connection import get_async_connection

    from airflow_atomic_store import metrics
    from airflow_atomic_store.hooks import atomic_store
    from airflow_atomic_store.operators import base
    from airflow_atomic_store.triggers import hub

    assert atomic_store.BaseHook is sdk.BaseHook
    assert atomic_store.AirflowNotFoundException is sdk.AirflowNotFoundException
    assert base.SkipMixin is sdk.SkipMixin and base.BaseOperator is sdk.BaseOperator
    assert base.AirflowFailException is sdk.AirflowFailException
    assert metrics._stats() is sdk.Stats
    # Not BaseHook.aget_connection, which masks secrets synchronously before 3.3.2.
    assert hub.get_async_connection is get_async_connection
    assert not hasattr(compat, "aget_connection")


def test_base_hook_is_the_one_airflow_own_providers_build_on() -> None:
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    from airflow_atomic_store.hooks.atomic_store import AtomicStoreHook

    assert compat.BaseHook in PostgresHook.__mro__
    assert compat.BaseHook in AtomicStoreHook.__mro__


def test_skip_mixin_is_the_one_the_short_circuit_operator_uses() -> None:
    from airflow.providers.standard.operators.python import ShortCircuitOperator

    from airflow_atomic_store.operators import BaseAtomicOperator

    assert compat.SkipMixin in ShortCircuitOperator.__mro__
    assert compat.SkipMixin in BaseAtomicOperator.__mro__


def test_a_missing_connection_raises_the_not_found_exception_it_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_ATOMIC_STORE_COMPAT_MISSING", raising=False)
    with pytest.raises(compat.AirflowNotFoundException):
        compat.BaseHook.get_connection("atomic_store_compat_missing")


def test_the_fail_exception_fails_a_task_at_once_despite_retries(
    run_dag: Callable[..., DagRunResult], dag_id: str
) -> None:
    from airflow.sdk import task

    with new_dag(dag_id, default_args={"retries": 3, "retry_delay": timedelta(0)}) as dag:

        @task
        def give_up() -> None:
            raise compat.AirflowFailException("retrying cannot help")

        give_up()

    result = run_dag(dag)
    assert result.state_of("give_up") == "failed"
    assert result.try_number_of("give_up") == 1


@pytest.mark.postgres
def test_the_postgres_hook_connects_with_psycopg_3_on_every_line(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    monkeypatch.setenv("AIRFLOW_CONN_ATOMIC_STORE_COMPAT_PG", postgres_server.url)
    assert issubclass(compat.PostgresHook, PostgresHook)
    connection = compat.PostgresHook(postgres_conn_id="atomic_store_compat_pg").get_conn()
    try:
        assert isinstance(connection, psycopg.Connection)
        assert connection.execute("select 1").fetchone() == (1,)
    finally:
        connection.close()
