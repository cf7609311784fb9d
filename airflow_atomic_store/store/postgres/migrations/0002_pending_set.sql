-- Version 2 (issue 41): claims no longer build claimable sets, so every store has the
-- queue recipes' set (status equals pending, in createdAt order) from its schema, as
-- schema.create_default_set makes it for a new store. An older store gets it listed here
-- (a set of this filter that it already had is kept, declared), and its index is built
-- by the connection that ran this, right after the migration's transaction commits,
-- CONCURRENTLY and outside the schema lock (connection.py): writers are never blocked,
-- and no process queued on the schema lock waits for the build (or it for them).
CREATE TABLE IF NOT EXISTS {table_claim_sets} (
    name text COLLATE "C" PRIMARY KEY,
    spec jsonb NOT NULL,
    origin text NOT NULL CHECK (origin IN ('declared', 'automatic')),
    problem text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    used_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
INSERT INTO {table_claim_sets} (name, spec, origin)
VALUES (
    {name_set_c71a6ff1db},
    '{{"where":[{{"field":"status","operator":"equals","value":"pending"}}],"match":"all","order_by":"createdAt"}}',
    'declared'
)
ON CONFLICT (name) DO UPDATE SET origin = 'declared', problem = NULL;
