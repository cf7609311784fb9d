-- A store's tables and indexes, one statement per name, created in this order
-- (connection.py runs each). The hole in braces is the storage table, a validated
-- plain identifier (store.contract.check_storage_table).

-- name: rows
CREATE TABLE IF NOT EXISTS {table} (
    table_name TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    created_at TEXT NOT NULL,
    record_timestamp TEXT NOT NULL,
    PRIMARY KEY (table_name, key)
)

-- name: rows_created_idx
CREATE INDEX IF NOT EXISTS {table}_created_idx ON {table} (table_name, created_at, key)

-- name: claim_sets
CREATE TABLE IF NOT EXISTS {table}_claim_sets (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    origin TEXT NOT NULL CHECK (origin IN ('declared', 'automatic')),
    problem TEXT,
    created_at TEXT NOT NULL,
    used_at TEXT NOT NULL
)

-- name: receipts
CREATE TABLE IF NOT EXISTS {table}_receipts (
    idempotency_key TEXT PRIMARY KEY,
    primitive TEXT NOT NULL,
    table_name TEXT NOT NULL,
    target TEXT NOT NULL,
    result TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL
)

-- name: receipts_expiry_idx
CREATE INDEX IF NOT EXISTS {table}_receipts_expiry_idx ON {table}_receipts (expires_at)

-- name: migrations
-- The schema versions the store reached (store/migrations.py); the latest is the store's.
CREATE TABLE IF NOT EXISTS {table}_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL
)
