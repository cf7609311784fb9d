"""PostgreSQL schema: the rows table, its indexes and the mutation function.

Mutations run inside one PL/pgSQL function so that every primitive stays a
single statement: it walks the path with the same rules as the reference
``apply`` (``->`` with a text key only enters objects, with an integer only
enters arrays), creates missing parent objects for ``set``, and raises
SQLSTATE ``AS001`` when a mutation cannot apply, which aborts the statement
so nothing is written. The ``_v1`` suffix lets a later release change the
function without breaking running workers.

Loops walk arrays by index (``FOR i IN 0 .. jsonb_array_length(a) - 1``),
not ``FOR x IN SELECT … jsonb_array_elements(a)``: a query loop runs an SPI
query whose set-up PL/pgSQL repeats in every transaction, and each primitive
is its own transaction, so it cost a guarded decrement about 0.4 ms per
statement on the bench machine (see docs/benchmarks.md).
"""

from __future__ import annotations

from psycopg import sql

MUTATION_ERROR_SQLSTATE = "AS001"
APPLY_FUNCTION = "atomic_store_apply_v1"
#: Adds to one JSON value by the reference rules (raises AS001 where they fail).
ADD_FUNCTION = "atomic_store_add_v1"

#: Serialises concurrent first use across processes (an arbitrary constant).
SCHEMA_LOCK_ID = 0x41544F4D  # "ATOM"

TABLE_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    table_name text NOT NULL,
    key text NOT NULL,
    value jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    record_timestamp timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (table_name, key)
);
CREATE INDEX IF NOT EXISTS {created_index} ON {table} (table_name, created_at, key);
"""

#: Built on first use of ``orderBy: recordTimestamp`` (``ORDER_INDEXES``), not with the
#: table: every claim and update writes ``record_timestamp``, and an index on it is
#: one more entry per row version that only ordering by it repays.
RECORD_INDEX_DDL = (
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {table} (table_name, record_timestamp, key)"
)

#: Idempotency receipts (``store/receipts.py``); the expiry index serves the purge.
RECEIPTS_DDL = """
CREATE TABLE IF NOT EXISTS {receipts} (
    idempotency_key text NOT NULL,
    primitive text NOT NULL,
    table_name text NOT NULL,
    target text NOT NULL,
    result jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at timestamptz NOT NULL,
    CONSTRAINT {receipts_key} PRIMARY KEY (idempotency_key)
);
CREATE INDEX IF NOT EXISTS {expiry_index} ON {receipts} (expires_at);
"""

#: The catalog of claimable sets (``store/claim_sets.py``): one row per partial index.
SETS_DDL = """
CREATE TABLE IF NOT EXISTS {sets} (
    name text PRIMARY KEY,
    table_name text NOT NULL,
    spec jsonb NOT NULL,
    origin text NOT NULL CHECK (origin IN ('declared', 'automatic')),
    problem text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""

FUNCTIONS_DDL = r"""
CREATE OR REPLACE FUNCTION atomic_store_fail_v1(field text, problem text) RETURNS jsonb
LANGUAGE plpgsql AS $fn$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'AS001', MESSAGE = problem, DETAIL = field;
END
$fn$;

CREATE OR REPLACE FUNCTION atomic_store_set_v1(
    doc jsonb, path jsonb, depth integer, new_value jsonb, field text, prefix text
) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    segment jsonb := path -> depth;
    last boolean := depth = jsonb_array_length(path) - 1;
    here text := CASE WHEN prefix = '' THEN 'the row value' ELSE quote_literal(prefix) END;
    key text;
    idx integer;
BEGIN
    IF jsonb_typeof(segment) = 'string' THEN
        key := segment #>> '{}';
        IF doc IS NULL THEN
            doc := '{}'::jsonb;
        ELSIF jsonb_typeof(doc) <> 'object' THEN
            RETURN atomic_store_fail_v1(field, format(
                'cannot set through %s: it is a %s, not an object', here, jsonb_typeof(doc)));
        END IF;
        IF last THEN
            RETURN doc || jsonb_build_object(key, new_value);
        END IF;
        RETURN doc || jsonb_build_object(key, atomic_store_set_v1(
            doc -> key, path, depth + 1, new_value, field,
            CASE WHEN prefix = '' THEN key ELSE prefix || '.' || key END));
    END IF;
    idx := segment::integer;
    IF doc IS NULL OR jsonb_typeof(doc) <> 'array' THEN
        RETURN atomic_store_fail_v1(field, format(
            'cannot index %s: it is a %s, not an array', here,
            coalesce(jsonb_typeof(doc), 'missing value')));
    END IF;
    IF idx >= jsonb_array_length(doc) THEN
        RETURN atomic_store_fail_v1(field, format(
            'index %s is out of range for %s (length %s)', idx, here, jsonb_array_length(doc)));
    END IF;
    IF NOT last THEN
        new_value := atomic_store_set_v1(
            doc -> idx, path, depth + 1, new_value, field, prefix || '[' || idx || ']');
    END IF;
    RETURN jsonb_set(doc, ARRAY[idx::text], new_value);
END
$fn$;

CREATE OR REPLACE FUNCTION atomic_store_get_v1(doc jsonb, path jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    segment jsonb;
    i integer;
BEGIN
    FOR i IN 0 .. jsonb_array_length(path) - 1 LOOP
        segment := path -> i;
        IF jsonb_typeof(segment) = 'string' THEN
            doc := doc -> (segment #>> '{}');
        ELSIF jsonb_typeof(doc) = 'array' THEN
            -- only arrays: on a scalar, "-> 0" would return the scalar itself
            doc := doc -> (segment::integer);
        ELSE
            RETURN NULL;
        END IF;
        EXIT WHEN doc IS NULL;
    END LOOP;
    RETURN doc;
END
$fn$;

CREATE OR REPLACE FUNCTION atomic_store_add_v1(current jsonb, delta jsonb, field text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    a numeric;
    b numeric := delta::numeric;
    total numeric;
    total_text text;
BEGIN
    IF current IS NULL OR jsonb_typeof(current) = 'null' THEN
        a := 0;
    ELSIF jsonb_typeof(current) <> 'number' THEN
        RETURN atomic_store_fail_v1(field, format(
            'cannot increment a %s; increment needs a number', jsonb_typeof(current)));
    ELSE
        a := current::numeric;
    END IF;
    -- Integers stay integers (exact); a fractional operand makes it a float,
    -- added in double precision as Python does.
    IF scale(a) = 0 AND scale(b) = 0 THEN
        total := a + b;
        IF total < -9223372036854775808 OR total > 9223372036854775807 THEN
            RETURN atomic_store_fail_v1(field, 'increment result is outside the 64-bit range');
        END IF;
        RETURN to_jsonb(total);
    END IF;
    BEGIN
        -- float8's text is the shortest exact form, as Python writes it (1e+16
        -- included); as numeric with at least one fractional digit it is stored
        -- positionally ("10000000000000000.0") and reads back as a float.
        total_text := (a::float8 + b::float8)::text;
        total := total_text::numeric;
        IF scale(total) = 0 THEN
            total := round(total, 1);
        END IF;
        RETURN to_jsonb(total);
    EXCEPTION WHEN numeric_value_out_of_range THEN
        RETURN atomic_store_fail_v1(field, 'increment result is not a finite number');
    END;
END
$fn$;

CREATE OR REPLACE FUNCTION atomic_store_apply_v1(doc jsonb, mutations jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    m jsonb;
    i integer;
    new_value jsonb;
BEGIN
    FOR i IN 0 .. jsonb_array_length(mutations) - 1 LOOP
        m := mutations -> i;
        IF m ->> 'op' = 'set' THEN
            new_value := m -> 'value';
        ELSE
            new_value := atomic_store_add_v1(
                atomic_store_get_v1(doc, m -> 'path'), m -> 'value', m ->> 'field');
        END IF;
        doc := atomic_store_set_v1(doc, m -> 'path', 0, new_value, m ->> 'field', '');
    END LOOP;
    RETURN doc;
END
$fn$;
"""

#: Every function FUNCTIONS_DDL installs: a schema lacking any of them is incomplete.
FUNCTION_NAMES = (
    "atomic_store_fail_v1",
    "atomic_store_set_v1",
    "atomic_store_get_v1",
    ADD_FUNCTION,
    APPLY_FUNCTION,
)

#: Which parts of this release's schema are missing: (the tables among those
#: named, whether any function is),
#: looked up where unqualified names resolve (the search path).
#:
#: This reads the catalogs with the statement's own snapshot on purpose, not
#: through ``to_regclass``/``to_regprocedure``: those consult the backend's catalog
#: cache without taking a lock, so a session that found the table missing, then
#: waited for the schema lock while another created it, kept its cached "missing"
#: and ran ``CREATE INDEX IF NOT EXISTS`` on the new table. That statement queues
#: behind a concurrent ``CREATE INDEX CONCURRENTLY``, which waits for the sessions
#: queued on the schema lock: a deadlock. Read committed gives each statement a
#: fresh snapshot, so the check made after taking the lock sees what the previous
#: holder committed.
SCHEMA_PROBE = """
WITH visible AS (
    SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = ANY (current_schemas(false))
)
SELECT
    ARRAY(
        SELECT name FROM unnest(%(tables)s::text[]) AS name
        WHERE NOT EXISTS (
            SELECT FROM pg_catalog.pg_class
            WHERE relname = name AND relkind IN ('r', 'p')
              AND relnamespace IN (SELECT oid FROM visible)
        )
    ),
    (
        SELECT count(DISTINCT proname) FROM pg_catalog.pg_proc
        WHERE proname = ANY (%(functions)s) AND pronamespace IN (SELECT oid FROM visible)
    ) < cardinality(%(functions)s::text[])
"""


def schema_tables(table_name: str) -> dict[str, bytes]:
    """Each table of one store (the rows, the sets catalog, the receipts) and its DDL."""
    receipts = f"{table_name}_receipts"
    return {
        table_name: table_ddl(table_name),
        f"{table_name}_claim_sets": SETS_DDL.format(sets=sets_table(table_name)).encode(),
        receipts: RECEIPTS_DDL.format(
            receipts=sql.Identifier(receipts).as_string(None),
            receipts_key=sql.Identifier(f"{receipts}_pkey").as_string(None),
            expiry_index=sql.Identifier(f"{receipts}_expiry_idx").as_string(None),
        ).encode(),
    }


def record_index(table_name: str) -> tuple[str, bytes]:
    """The name of the ``record_timestamp`` index of a rows table and its DDL."""
    name = f"{table_name}_record_idx"
    ddl = RECORD_INDEX_DDL.format(
        index=sql.Identifier(name).as_string(None), table=sql.Identifier(table_name).as_string(None)
    )
    return name, ddl.encode()


def sets_table(table_name: str) -> str:
    """The quoted name of the claimable-set catalog that belongs to a rows table."""
    return sql.Identifier(f"{table_name}_claim_sets").as_string(None)


def table_ddl(table_name: str) -> bytes:
    """The rows table and its indexes, for one storage table name."""
    return TABLE_DDL.format(
        table=sql.Identifier(table_name).as_string(None),
        created_index=sql.Identifier(f"{table_name}_created_idx").as_string(None),
    ).encode()
