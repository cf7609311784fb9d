"""The provider registers with Airflow: metadata, the providers manager, the CLI."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from importlib.metadata import distribution
from typing import Any

import pytest

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
    assert len(provider.data["operators"][0]["python-modules"]) == 4


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
    # Airflow's own command: on 3.0 its log lines (the providers manager's first load,
    # when this test runs first) come on stdout ahead of the JSON.
    out = capsys.readouterr().out
    listed = json.JSONDecoder().raw_decode(out, out.index("[{"))[0]
    ours = [entry for entry in listed if entry["package_name"] == "airflow-atomic-store"]
    assert ours and ours[0]["version"] == distribution("airflow-atomic-store").version


FORM_FIELDS = {"storage_table", "auto_claim_sets", "receipt_retention", "busy_timeout"}


# What Airflow's UI asks the API server for (``/ui/connections/hook_meta``), asked of a
# fresh interpreter as a starting API server answers it: on 3.1 the service reads the
# providers manager's form widgets as first loaded in the process (under its WTForms
# stand-ins), and this test session has loaded them before, without the stand-ins.
# Airflow 3.2.2's own service reads ProvidersManager.hooks, which 3.2 deprecates.
HOOK_META = """
import json, warnings
warnings.filterwarnings("ignore")
from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService
from airflow.providers_manager import ProvidersManager
(sqlite,) = [m for m in HookMetaService.hook_meta_data() if m.connection_type == "sqlite"]
print(json.dumps({
    "hook_class_name": sqlite.hook_class_name,
    "extra_fields": sqlite.extra_fields or {},
    "standard_fields": sqlite.standard_fields.model_dump(mode="json"),
    "hidden": ProvidersManager().field_behaviours["sqlite"]["hidden_fields"],
}))
"""


@pytest.mark.skipif(SQLITE_PROVIDER, reason="the SQLite provider owns the sqlite type here")
def test_the_sqlite_form_offers_the_store_options_as_fields_and_keeps_the_extra_box() -> None:
    """From provider info's ``conn-fields`` on 3.2+, from the hook's methods on 3.0/3.1."""
    done = subprocess.run(
        [sys.executable, "-c", HOOK_META], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    sqlite = json.loads(done.stdout.strip().splitlines()[-1])
    assert sqlite["hook_class_name"] == HOOK_CLASS
    fields = sqlite["extra_fields"]
    assert set(fields) == FORM_FIELDS
    assert fields["auto_claim_sets"]["schema"]["type"] == ["boolean", "null"]
    assert fields["receipt_retention"]["schema"]["type"] == ["integer", "null"]
    assert fields["storage_table"]["schema"]["title"] == "Storage table"
    standard = sqlite["standard_fields"]
    assert standard["host"]["title"] == "Absolute path of the store file"
    assert standard["password"]["hidden"]
    # The Extra box stays: the form's fields are written into it.
    assert "extra" not in sqlite["hidden"]


def test_the_hook_and_provider_info_declare_the_same_form() -> None:
    """3.0/3.1 read the hook, 3.2+ provider info: one declaration for both."""
    from airflow_atomic_store.hooks.atomic_store import AtomicStoreHook

    behaviour = AtomicStoreHook.get_ui_field_behaviour()
    assert "extra" not in behaviour["hidden_fields"]
    if not SQLITE_PROVIDER:
        (declared,) = get_provider_info()["connection-types"]
        assert set(declared["conn-fields"]) == FORM_FIELDS
        assert declared["ui-field-behaviour"]["hidden-fields"] == behaviour["hidden_fields"]
        assert declared["ui-field-behaviour"]["relabeling"] == behaviour["relabeling"]


def test_a_connection_saved_by_the_form_opens_its_store_with_those_options(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The form saves every field, an empty one as null or "": that is the default."""
    import sqlite3

    from airflow_atomic_store.hooks.atomic_store import AtomicStoreHook

    path = tmp_path / "form.db"
    extra = {
        "storage_table": "form_rows",
        "auto_claim_sets": False,
        "receipt_retention": None,
        "busy_timeout": 5,
    }
    monkeypatch.setenv(
        "AIRFLOW_CONN_FORM_STORE",
        json.dumps({"conn_type": "sqlite", "host": str(path), "extra": extra}),
    )
    with AtomicStoreHook("form_store") as hook:
        hook.put("jobs", "a", {"status": "pending"})
        assert hook.atomic_claim("jobs", limit=1)["count"] == 1
        assert [s["origin"] for s in hook.claim_sets()] == ["declared"]  # the schema's own
    db = sqlite3.connect(path)
    try:
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    finally:
        db.close()
    assert "form_rows" in names
    monkeypatch.setenv(
        "AIRFLOW_CONN_FORM_STORE",
        json.dumps(
            {"conn_type": "sqlite", "host": str(path), "extra": {**extra, "storage_table": ""}}
        ),
    )
    with AtomicStoreHook("form_store") as hook:
        assert hook.count("jobs") == 0  # the default storage table: no rows there
