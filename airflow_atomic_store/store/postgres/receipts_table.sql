-- Idempotency receipts (store/contract.py's Receipt); the expiry index serves the purge.
-- Keys and names are byte-ordered (COLLATE "C"), as in the rows table (rows_table.sql).
-- Holes in braces: identifiers quoted by psycopg, filled by schema.schema_tables.
CREATE TABLE IF NOT EXISTS {receipts} (
    idempotency_key text COLLATE "C" NOT NULL,
    primitive text NOT NULL,
    table_name text COLLATE "C" NOT NULL,
    target text COLLATE "C" NOT NULL,
    result jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at timestamptz NOT NULL,
    CONSTRAINT {receipts_key} PRIMARY KEY (idempotency_key)
);
CREATE INDEX IF NOT EXISTS {expiry_index} ON {receipts} (expires_at);
