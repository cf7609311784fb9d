-- The catalog of claimable sets (schema.py): one row per partial index, store-wide
-- (a set serves every logical table whose claims use its filter).
-- spec: the set (where, match, order_by); a store made before 0.1.0 may also hold a
-- record_index marker row (ignored). used_at: written by releases before 0.1.0 (their
-- automatic sets' idle clock); kept, unused.
-- Names are byte-ordered (COLLATE "C"), as in the rows table (rows_table.sql).
-- The hole in braces: the catalog's identifier, quoted by psycopg (schema.schema_tables).
CREATE TABLE IF NOT EXISTS {sets} (
    name text COLLATE "C" PRIMARY KEY,
    spec jsonb NOT NULL,
    origin text NOT NULL CHECK (origin IN ('declared', 'automatic')),
    problem text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    used_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
