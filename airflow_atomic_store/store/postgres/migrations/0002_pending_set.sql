-- Version 2 (issue 41): claims no longer build claimable sets, so every store has the
-- queue recipes' set (status equals pending, in createdAt order) from its schema, as
-- schema.create_default_set makes it for a new store. An older store gets it here; a set
-- of this filter that it already had (declared, or built by a claim) is kept, declared.
-- In the migration's transaction, so built without CONCURRENTLY: writes to the rows
-- table wait for one pass over it. Nothing else changed in version 2's layout.
CREATE TABLE IF NOT EXISTS {table_claim_sets} (
    name text COLLATE "C" PRIMARY KEY,
    spec jsonb NOT NULL,
    origin text NOT NULL CHECK (origin IN ('declared', 'automatic')),
    problem text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    used_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS {table_set_c71a6ff1db} ON {table} (table_id, created_at, key)
WHERE (((value -> 'status') = '"pending"'::jsonb::jsonb));
INSERT INTO {table_claim_sets} (name, spec, origin)
VALUES (
    {name_set_c71a6ff1db},
    '{{"where":[{{"field":"status","operator":"equals","value":"pending"}}],"match":"all","order_by":"createdAt"}}',
    'declared'
)
ON CONFLICT (name) DO UPDATE SET origin = 'declared', problem = NULL;
