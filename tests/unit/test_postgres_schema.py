"""The PostgreSQL schema text: what the first-use check looks for matches what it installs."""

from __future__ import annotations

import re

from airflow_atomic_store.store.postgres.schema import (
    FUNCTION_NAMES,
    FUNCTIONS_DDL,
    schema_tables,
)


def test_the_schema_check_looks_for_every_function_the_schema_installs() -> None:
    installed = re.findall(r"CREATE OR REPLACE FUNCTION (\w+)\(", FUNCTIONS_DDL)
    assert sorted(installed) == sorted(FUNCTION_NAMES)


def test_the_table_and_index_names_are_quoted_as_created() -> None:
    ddl = schema_tables("Mixed_Case_Rows")["Mixed_Case_Rows"].decode()
    assert 'CREATE TABLE IF NOT EXISTS "Mixed_Case_Rows" (' in ddl
    assert '"Mixed_Case_Rows_created_idx" ON "Mixed_Case_Rows"' in ddl
    assert "record_timestamp, key" not in ddl  # every write changes it: no index on it
