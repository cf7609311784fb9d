-- The PostgreSQL backend's static statements, one per name (queries.py loads them).
-- Holes in braces are identifiers quoted by psycopg (sql.Identifier); values are
-- bound parameters (%s).

-- name: get
SELECT value FROM {table} WHERE table_id = %s AND key = %s

-- name: get_by_name
-- A trigger's read on its own connection: the id from the catalog, never a held one.
SELECT value FROM {table}
WHERE table_id = (SELECT id FROM {tables} WHERE name = %s) AND key = %s

-- name: get_many
-- Many rows in one statement (h40): the id from the catalog, by name.
SELECT key, value FROM {table}
WHERE table_id = (SELECT id FROM {tables} WHERE name = %(table)s) AND key = ANY(%(keys)s)

-- name: get_changed_by_name
-- The waiters' shared read (h40): of the awaited keys, those whose row's version (xmin,
-- new at every write) is not the one last read; a row gone since comes back as NULLs.
SELECT k.key, r.value, r.xmin::text
FROM unnest(%(keys)s::text[], %(seen)s::text[]) AS k (key, seen)
LEFT JOIN {table} AS r
    ON r.table_id = (SELECT id FROM {tables} WHERE name = %(table)s) AND r.key = k.key
WHERE r.xmin::text IS DISTINCT FROM k.seen

-- name: delete
DELETE FROM {table} WHERE table_id = %s AND key = %s RETURNING 1

-- name: read_receipt
-- The recorded use and result of a key, and whether it has expired.
SELECT primitive, table_name, target, result, expires_at < clock_timestamp()
FROM {receipts} WHERE idempotency_key = %s

-- name: forget_expired_receipt
DELETE FROM {receipts} WHERE idempotency_key = %s AND expires_at < clock_timestamp()

-- name: purge_receipts
-- A bounded batch of expired receipts; concurrent purges skip each other's rows.
DELETE FROM {receipts} WHERE idempotency_key IN (
    SELECT idempotency_key FROM {receipts}
    WHERE expires_at < clock_timestamp() ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED
)
