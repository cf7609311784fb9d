"""The migration files' rules, read without a database (``store/migrations.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_atomic_store.exceptions import SchemaVersionError
from airflow_atomic_store.store import migrations
from airflow_atomic_store.store.postgres import schema
from airflow_atomic_store.store.sqlite import connection


def test_both_backends_number_the_same_versions_with_the_same_names() -> None:
    postgres = [(m.version, m.name) for m in schema.MIGRATIONS]
    sqlite = [(m.version, m.name) for m in connection.MIGRATIONS]
    assert postgres == sqlite


def _package(root: Path, name: str, files: list[str]) -> str:
    folder = root / name / "migrations"
    folder.mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    for file in files:
        (folder / file).write_text(f"-- {file}\n")
    return name


def test_migrations_load_in_order_from_version_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    package = _package(tmp_path, "ordered_steps", ["0003_then.sql", "0002_first.sql", "notes.txt"])
    loaded = migrations.load(package)
    assert [(m.version, m.name) for m in loaded] == [(2, "first"), (3, "then")]
    assert migrations.latest(loaded) == 3
    assert migrations.pending(2, loaded) == loaded[1:]
    assert migrations.pending(None, loaded) == ()  # a new store is made at the latest


@pytest.mark.parametrize("files", [["0003_gap.sql"], ["0002_a.sql", "0002_b.sql"]])
def test_a_gap_or_a_repeated_number_is_refused_when_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: list[str]
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    package = _package(tmp_path, f"bad_steps_{len(files)}", files)
    with pytest.raises(RuntimeError, match="from 2, no gaps"):
        migrations.load(package)


def test_a_migrations_holes_are_the_storage_tables_names_quoted() -> None:
    holes = schema.migration_holes("Mixed_Rows")
    text = "ALTER TABLE {table_receipts} ADD x int; SELECT '{{}}' FROM {table}"
    assert text.format_map(holes) == (
        'ALTER TABLE "Mixed_Rows_receipts" ADD x int; SELECT \'{}\' FROM "Mixed_Rows"'
    )
    with pytest.raises(KeyError):
        "{rows}".format_map(holes)


def test_the_version_errors_name_both_versions_and_what_to_do() -> None:
    steps = (migrations.Migration(2, "two", ""),)
    with pytest.raises(SchemaVersionError) as newer:
        migrations.refuse_newer(3, steps, "rows")
    assert (newer.value.found, newer.value.expected) == (3, 2)
    assert "schema version 3" in str(newer.value) and "Install that release" in str(newer.value)
    migrations.refuse_newer(2, steps, "rows")  # this release's own version opens
    behind = migrations.behind(None, steps, "rows", "it was opened read-only")
    assert "no recorded schema version" in str(behind) and "needs 2" in str(behind)
    assert migrations.MIGRATE_COMMAND in str(behind)
