-- The PostgreSQL driver's static statements, one per name (statements.py loads them).
-- Holes in braces are identifiers quoted by psycopg (sql.Identifier); values are
-- named parameters (%(name)s). A logical table is named, and its id looked up in
-- the tables catalog by the statement itself (statements.py says why).

-- name: get
SELECT value FROM {table}
WHERE table_id = (SELECT id FROM {tables} WHERE name = %(table)s) AND key = %(key)s

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
DELETE FROM {table}
WHERE table_id = (SELECT id FROM {tables} WHERE name = %(table)s) AND key = %(key)s
RETURNING 1

-- name: find_table
SELECT id FROM {tables} WHERE name = %(table)s

-- name: add_table
-- Insert the name unless it is there; when another session inserts it meanwhile
-- (committed after this statement's snapshot), neither branch returns a row and the
-- next statement, on a new snapshot, finds it.
WITH found AS (SELECT id FROM {tables} WHERE name = %(table)s),
added AS (
    INSERT INTO {tables} (name) SELECT %(table)s WHERE NOT EXISTS (SELECT FROM found)
    ON CONFLICT (name) DO NOTHING RETURNING id
)
SELECT id FROM found UNION ALL SELECT id FROM added

-- name: read_receipt
-- The recorded use and result of a key, and whether it has expired.
SELECT primitive, table_name, target, result, expires_at < clock_timestamp()
FROM {receipts} WHERE idempotency_key = %(receipt_key)s

-- name: forget_expired_receipt
DELETE FROM {receipts}
WHERE idempotency_key = %(receipt_key)s AND expires_at < clock_timestamp()

-- name: purge_receipts
-- A bounded batch of expired receipts; concurrent purges skip each other's rows.
DELETE FROM {receipts} WHERE idempotency_key IN (
    SELECT idempotency_key FROM {receipts}
    WHERE expires_at < clock_timestamp() ORDER BY expires_at LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
