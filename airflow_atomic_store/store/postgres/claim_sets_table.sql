-- The catalog of claimable sets (store/claim_sets.py): one row per partial index, store-wide
-- (a set serves every logical table whose claims use its filter).
-- spec: the set (where, match, order_by), or the record_index marker for the row that
-- remembers a give-up on the record_timestamp index. used_at: when a claim last used
-- the set (noted at most hourly), which decides when an automatic set is idle.
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
