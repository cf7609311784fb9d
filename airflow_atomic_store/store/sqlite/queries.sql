-- The SQLite backend's static statements, one per name (statements.py loads them).
-- The hole in braces is the storage table, a validated plain identifier
-- (store.backend.check_storage_table); values are bound parameters (?).

-- name: get
SELECT value FROM {table} WHERE table_name = ? AND key = ?

-- name: get_many
-- The waiters' shared poll of many rows (h40); :keys is a JSON array of keys.
SELECT key, value FROM {table}
WHERE table_name = :table AND key IN (SELECT value FROM json_each(:keys))

-- name: put
-- A replaced row keeps its created_at: its place in a FIFO queue.
INSERT INTO {table} (table_name, key, value, created_at, record_timestamp)
VALUES (?, ?, ?, ?, ?) ON CONFLICT (table_name, key) DO UPDATE
SET value = excluded.value, record_timestamp = excluded.record_timestamp

-- name: insert
INSERT INTO {table} (table_name, key, value, created_at, record_timestamp) VALUES (?, ?, ?, ?, ?)

-- name: write
UPDATE {table} SET value = ?, record_timestamp = ? WHERE table_name = ? AND key = ?

-- name: delete
DELETE FROM {table} WHERE table_name = ? AND key = ?

-- name: read_receipt
SELECT primitive, table_name, target, result, expires_at < ?
FROM {table}_receipts WHERE idempotency_key = ?

-- name: forget_receipt
DELETE FROM {table}_receipts WHERE idempotency_key = ?

-- name: record_receipt
INSERT INTO {table}_receipts (idempotency_key, primitive, table_name, target, result,
    created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)

-- name: purge_receipts
DELETE FROM {table}_receipts WHERE idempotency_key IN (
    SELECT idempotency_key FROM {table}_receipts WHERE expires_at < ? ORDER BY expires_at LIMIT ?
)
