"""PostgreSQL schema: the rows table, its indexes and the mutation function.

Mutations run inside one PL/pgSQL function so that every primitive stays a
single statement: it walks the path with the same rules as the reference
``apply`` (``->`` with a text key only enters objects, with an integer only
enters arrays), creates missing parent objects for ``set``, and raises
SQLSTATE ``AS001`` when a mutation cannot apply, which aborts the statement
so nothing is written. The ``_v1`` suffix lets a later release change the
function without breaking running workers.

The static SQL (the functions, the tables' DDL, the schema probe) lives in
``.sql`` files beside this module, shipped as package data; the functions' loops
walk arrays by index because a query loop's set-up repeats in every transaction
(docs/benchmarks.md).
"""

from __future__ import annotations

import random
from importlib import resources

from psycopg import sql

from airflow_atomic_store.store import migrations
from airflow_atomic_store.store.named_queries import named_queries


def sql_file(name: str) -> str:
    """A static statement shipped beside this module (package data)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


MUTATION_ERROR_SQLSTATE = "AS001"
#: Raised by ``atomic_store_receipt_v1``: a keyed call's result is too large to record.
RESULT_TOO_LARGE_SQLSTATE = "AS002"
APPLY_FUNCTION = "atomic_store_apply_v1"
#: Adds to one JSON value by the reference rules (raises AS001 where they fail).
ADD_FUNCTION = "atomic_store_add_v1"

#: Serialises concurrent first use across processes (an arbitrary constant).
SCHEMA_LOCK_ID = 0x41544F4D  # "ATOM"

TABLE_DDL = sql_file("rows_table.sql")

#: The logical tables' ids (``tables.py``): the rows table keys its rows by them.
TABLES_DDL = sql_file("tables_catalog.sql")

#: Built on first use of ``orderBy: recordTimestamp`` (``ORDER_INDEXES``), not with the
#: table: every claim and update writes ``record_timestamp``, and an index on it is
#: one more entry per row version that only ordering by it repays.
RECORD_INDEX_DDL = (
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {table} (table_id, record_timestamp, key)"
)

#: Idempotency receipts (``store/receipts.py``); the expiry index serves the purge.
RECEIPTS_DDL = sql_file("receipts_table.sql")

#: The catalog of claimable sets (``store/claim_sets.py``): one row per partial index.
SETS_DDL = sql_file("claim_sets_table.sql")

FUNCTIONS_DDL = sql_file("functions.sql")
#: The versions a store reached (``store/migrations.py``), and the steps past version 1.
MIGRATIONS_DDL = sql_file("migrations_table.sql")
MIGRATIONS = migrations.load(__package__)
#: Reading and recording the version, and what the schema lock's holder checks first.
VERSION_QUERIES = named_queries(__package__, "schema_versions.sql")
#: The rows table's column that marks version 1's layout (a table id, not a name).
KEY_COLUMN = "table_id"

#: Every function FUNCTIONS_DDL installs: a schema lacking any of them is incomplete.
FUNCTION_NAMES = (
    "atomic_store_fail_v1",
    "atomic_store_set_v1",
    "atomic_store_get_v1",
    "atomic_store_exact_v1",
    "atomic_store_receipt_v1",
    ADD_FUNCTION,
    APPLY_FUNCTION,
)

#: Which parts of this release's schema are missing, read from the catalogs with the
#: statement's own snapshot: ``to_regclass``'s cache would repeat a "missing" seen
#: before the schema lock was taken (``PostgresBackend._ensure_schema`` says why that
#: deadlocks).
SCHEMA_PROBE = sql_file("schema_probe.sql")


def schema_tables(table_name: str) -> dict[str, bytes]:
    """Each table of one store (the tables catalog, the rows, the sets catalog, the
    receipts, the schema versions) and its DDL, in the order they are created."""
    receipts = f"{table_name}_receipts"
    return {
        tables_catalog_name(table_name): TABLES_DDL.format(
            tables=tables_catalog(table_name),
            ids=sql.Identifier(f"{table_name}_table_ids").as_string(None),
            ids_literal=sql.Literal(
                sql.Identifier(f"{table_name}_table_ids").as_string(None)
            ).as_string(None),
            start=random.randrange(1, 2**30),  # tables_catalog.sql says why
        ).encode(),
        table_name: table_ddl(table_name),
        f"{table_name}_claim_sets": SETS_DDL.format(sets=sets_table(table_name)).encode(),
        receipts: RECEIPTS_DDL.format(
            receipts=sql.Identifier(receipts).as_string(None),
            receipts_key=sql.Identifier(f"{receipts}_pkey").as_string(None),
            expiry_index=sql.Identifier(f"{receipts}_expiry_idx").as_string(None),
        ).encode(),
        migrations_table_name(table_name): MIGRATIONS_DDL.format(
            migrations=migrations_table(table_name)
        ).encode(),
    }


def migrations_table_name(table_name: str) -> str:
    """The name of the table that records a store's schema versions."""
    return f"{table_name}_migrations"


def migrations_table(table_name: str) -> str:
    """Its quoted name."""
    return sql.Identifier(migrations_table_name(table_name)).as_string(None)


def migration_holes(table_name: str) -> dict[str, str]:
    """A migration's ``{table}`` and ``{table_<suffix>}``, quoted by psycopg."""
    return migrations.holes(table_name, lambda name: sql.Identifier(name).as_string(None))


def record_index(table_name: str) -> tuple[str, bytes]:
    """The name of the ``record_timestamp`` index of a rows table and its DDL."""
    name = f"{table_name}_record_idx"
    ddl = RECORD_INDEX_DDL.format(
        index=sql.Identifier(name).as_string(None), table=sql.Identifier(table_name).as_string(None)
    )
    return name, ddl.encode()


def tables_catalog_name(table_name: str) -> str:
    """The name of the catalog of a rows table's logical tables and their ids."""
    return f"{table_name}_tables"


def tables_catalog(table_name: str) -> str:
    """The quoted name of the catalog of logical tables that belongs to a rows table."""
    return sql.Identifier(tables_catalog_name(table_name)).as_string(None)


def sets_table(table_name: str) -> str:
    """The quoted name of the claimable-set catalog that belongs to a rows table."""
    return sql.Identifier(f"{table_name}_claim_sets").as_string(None)


def table_ddl(table_name: str) -> bytes:
    """The rows table and its indexes, for one storage table name."""
    return _rows_holes(TABLE_DDL, table_name)


def _rows_holes(template: str, table_name: str) -> bytes:
    return template.format(
        table=sql.Identifier(table_name).as_string(None),
        tables=tables_catalog(table_name),
        created_index=sql.Identifier(f"{table_name}_created_idx").as_string(None),
    ).encode()
