-- The schema versions one store reached (store/migrations.py): one row per version, the
-- latest being the store's. Its name: the storage table's plus _migrations.
-- Holes in braces: identifiers quoted by psycopg, filled by schema.schema_tables.
CREATE TABLE IF NOT EXISTS {migrations} (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
