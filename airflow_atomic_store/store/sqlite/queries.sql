-- The SQLite driver's static statements, one per name (statements.py loads them).
-- The hole in braces is the storage table, a validated plain identifier
-- (store.contract.check_storage_table); values are named parameters (:name).

-- name: get
SELECT value FROM {table} WHERE table_name = :table AND key = :key

-- name: get_many
-- The waiters' shared poll of many rows (h40); :keys is a JSON array of keys.
SELECT key, value FROM {table}
WHERE table_name = :table AND key IN (SELECT value FROM json_each(:keys))

-- name: put
-- A replaced row keeps its created_at: its place in a FIFO queue.
INSERT INTO {table} (table_name, key, value, created_at, record_timestamp)
VALUES (:table, :key, :value, :now, :now) ON CONFLICT (table_name, key) DO UPDATE
SET value = excluded.value, record_timestamp = excluded.record_timestamp

-- name: insert
INSERT INTO {table} (table_name, key, value, created_at, record_timestamp)
VALUES (:table, :key, :value, :now, :now)

-- name: insert_at
-- A bulk upsert's row: created at its item's place in the call (timestamps.series).
INSERT INTO {table} (table_name, key, value, created_at, record_timestamp)
VALUES (:table, :key, :value, :created_at, :created_at)

-- name: existing
-- A bulk upsert's keys (one JSON array) that have rows, with their values.
SELECT key, value FROM {table}
WHERE table_name = :table AND key IN (SELECT value FROM json_each(:keys))

-- name: existing_keys
-- The same for seeds, which need only which rows exist.
SELECT key, NULL FROM {table}
WHERE table_name = :table AND key IN (SELECT value FROM json_each(:keys))

-- name: write
UPDATE {table} SET value = :value, record_timestamp = :now
WHERE table_name = :table AND key = :key

-- name: delete
DELETE FROM {table} WHERE table_name = :table AND key = :key

-- name: read_receipt
SELECT primitive, table_name, target, result, expires_at < :now
FROM {table}_receipts WHERE idempotency_key = :receipt_key

-- name: forget_receipt
DELETE FROM {table}_receipts WHERE idempotency_key = :receipt_key

-- name: record_receipt
INSERT INTO {table}_receipts (idempotency_key, primitive, table_name, target, result,
    created_at, expires_at)
VALUES (:receipt_key, :primitive, :receipt_table, :target, :result, :now, :expires_at)

-- name: purge_receipts
DELETE FROM {table}_receipts WHERE idempotency_key IN (
    SELECT idempotency_key FROM {table}_receipts WHERE expires_at < :now
    ORDER BY expires_at LIMIT :limit
)

-- name: load_sets
SELECT s.name, s.spec, s.origin, s.problem,
    EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = s.name)
FROM {table}_claim_sets AS s ORDER BY s.name

-- name: forget_set
DELETE FROM {table}_claim_sets WHERE name = :name

-- name: index_exists
SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = :name
