-- Idempotency receipts (store/receipts.py); the expiry index serves the purge.
-- Holes in braces: identifiers quoted by psycopg, filled by schema.schema_tables.
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
