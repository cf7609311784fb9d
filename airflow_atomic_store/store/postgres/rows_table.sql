-- The rows table of one store and its FIFO index.
-- table_id is the logical table's id in the store's tables catalog (tables_catalog.sql).
-- Keys compare in byte order (COLLATE "C"), whatever the database's locale: rows of
-- one instant then go by key as the reference evaluator orders them (code points),
-- so which rows a claim's limit takes and the order a query lists them in are the
-- same on every server; and every index comparison on them is a memcmp, not the
-- locale's collation rules.
-- Holes in braces: identifiers quoted by psycopg, filled by schema.table_ddl.
CREATE TABLE IF NOT EXISTS {table} (
    table_id integer NOT NULL,
    key text COLLATE "C" NOT NULL,
    value jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    record_timestamp timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (table_id, key)
);
CREATE INDEX IF NOT EXISTS {created_index} ON {table} (table_id, created_at, key);
