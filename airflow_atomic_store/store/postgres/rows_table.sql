-- The rows table of one store and its FIFO index.
-- Holes in braces: identifiers quoted by psycopg, filled by schema.table_ddl.
CREATE TABLE IF NOT EXISTS {table} (
    table_name text NOT NULL,
    key text NOT NULL,
    value jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    record_timestamp timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (table_name, key)
);
CREATE INDEX IF NOT EXISTS {created_index} ON {table} (table_name, created_at, key);
