-- Reading and recording a store's schema version (store/migrations.py; connection.py
-- runs them). The hole in braces is the storage table, a validated plain identifier.

-- name: version
SELECT max(version) FROM {table}_migrations

-- name: record
INSERT INTO {table}_migrations (version, name, applied_at) VALUES (:version, :name, :now)

-- name: has_key_column
-- Whether the rows table has version 1's key column (the logical table's name).
SELECT count(*) FROM pragma_table_info(:table) WHERE name = :key_column
