-- The catalog of claimable sets (store/claim_sets.py): one row per partial index.
-- Names are byte-ordered (COLLATE "C"), as in the rows table (rows_table.sql).
-- The hole in braces: the catalog's identifier, quoted by psycopg (schema.schema_tables).
CREATE TABLE IF NOT EXISTS {sets} (
    name text COLLATE "C" PRIMARY KEY,
    table_name text COLLATE "C" NOT NULL,
    spec jsonb NOT NULL,
    origin text NOT NULL CHECK (origin IN ('declared', 'automatic')),
    problem text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
