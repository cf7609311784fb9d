-- Version 2 (issue 41): claims no longer build claimable sets, so every store has the
-- queue recipes' set (status equals pending, in createdAt order) from its schema, as
-- connection.create_set makes it for a new store. An older store gets it here; a set of
-- this filter that it already had (declared, or built by a claim) is kept, declared.

-- name: sets
CREATE TABLE IF NOT EXISTS {table_claim_sets} (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    origin TEXT NOT NULL CHECK (origin IN ('declared', 'automatic')),
    problem TEXT,
    created_at TEXT NOT NULL,
    used_at TEXT NOT NULL
)

-- name: pending_set
CREATE INDEX IF NOT EXISTS {table_set_c71a6ff1db} ON {table} (table_name, created_at, key)
WHERE ((json_extract(value, '$.status') = 'pending'))

-- name: listed
INSERT INTO {table_claim_sets} (name, spec, origin, created_at, used_at)
VALUES (
    {name_set_c71a6ff1db},
    '{{"where":[{{"field":"status","operator":"equals","value":"pending"}}],"match":"all","order_by":"createdAt"}}',
    'declared',
    strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
)
ON CONFLICT (name) DO UPDATE SET origin = 'declared', problem = NULL
