"""The provider registers with Airflow: metadata, the providers manager, the CLI."""

from __future__ import annotations

import importlib.util
import json
from importlib.metadata import distribution

import pytest

from airflow_atomic_store import __version__
from airflow_atomic_store.get_provider_info import get_provider_info

HOOK_CLASS = "airflow_atomic_store.hooks.atomic_store.AtomicStoreHook"
SQLITE_PROVIDER = importlib.util.find_spec("airflow.providers.sqlite") is not None


def test_provider_info_matches_the_distribution_and_airflow_schema() -> None:
    from airflow.providers_manager import _create_provider_info_schema_validator

    info = get_provider_info()
    _create_provider_info_schema_validator().validate(info)
    dist = distribution("airflow-atomic-store")
    assert info["package-name"] == dist.metadata["Name"] == "airflow-atomic-store"
    assert info["versions"] == [dist.version]


def test_the_providers_manager_lists_the_provider_with_its_version() -> None:
    from airflow.providers_manager import ProvidersManager

    provider = ProvidersManager().providers["airflow-atomic-store"]
    assert provider.version == distribution("airflow-atomic-store").version
    assert provider.data["hooks"][0]["python-modules"] == [
        "airflow_atomic_store.hooks.atomic_store"
    ]
    assert len(provider.data["operators"][0]["python-modules"]) == 3


@pytest.mark.skipif(SQLITE_PROVIDER, reason="the SQLite provider owns the sqlite type here")
def test_the_hook_serves_sqlite_connections_when_no_sqlite_provider_does() -> None:
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    hook = ProvidersManagerTaskRuntime().hooks["sqlite"]
    assert hook is not None
    assert (hook.hook_class_name, hook.package_name) == (HOOK_CLASS, "airflow-atomic-store")
    assert hook.connection_id_attribute_name == "conn_id"
    assert hook.connection_testable


@pytest.mark.skipif(SQLITE_PROVIDER, reason="the SQLite provider owns the sqlite type here")
def test_the_ui_form_for_sqlite_asks_for_the_store_file_path() -> None:
    from airflow.providers_manager import ProvidersManager

    behaviour = ProvidersManager().field_behaviours["sqlite"]
    assert behaviour["relabeling"] == {"host": "Absolute path of the store file"}
    assert "password" in behaviour["hidden_fields"]


def test_postgres_stays_with_the_postgres_provider() -> None:
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    hook = ProvidersManagerTaskRuntime().hooks["postgres"]
    assert hook is not None and hook.package_name == "apache-airflow-providers-postgres"


def test_airflow_providers_list_shows_the_provider(capsys: pytest.CaptureFixture[str]) -> None:
    from airflow.cli import cli_parser

    args = cli_parser.get_parser().parse_args(["providers", "list", "--output", "json"])
    args.func(args)
    listed = json.loads(capsys.readouterr().out)
    ours = [entry for entry in listed if entry["package_name"] == "airflow-atomic-store"]
    assert ours and ours[0]["version"] == distribution("airflow-atomic-store").version


def test_the_integration_links_the_released_docs_and_how_to_guides() -> None:
    from pathlib import Path

    (integration,) = get_provider_info()["integrations"]
    docs = Path(__file__).resolve().parents[2] / "docs"
    links = [integration["external-doc-url"], *integration["how-to-guide"]]
    prefix = (
        f"https://github.com/airflow-atomic-store/airflow-atomic-store/blob/v{__version__}/docs/"
    )
    for link in links:
        assert link.startswith(prefix), link
        assert (docs / link.removeprefix(prefix)).is_file(), link
