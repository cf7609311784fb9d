-- Converts a rows table of the first layout (the logical table's name, text, leading
-- the primary key and every index) to table ids (rows_table.sql). Run once, by the
-- first process to find the old layout, inside the transaction that holds the schema
-- lock (connection.py), after the tables catalog exists. Dropping the name column drops
-- the primary key and the indexes on it, claimable sets' included; the caller builds
-- the sets' indexes again. A view or constraint of the user's on the column makes
-- the DROP fail, and the whole conversion with it: nothing is dropped for them.
-- Holes in braces: identifiers quoted by psycopg, filled by schema.upgrade_ddl.
INSERT INTO {tables} (name) SELECT DISTINCT table_name FROM {table} ORDER BY 1
    ON CONFLICT (name) DO NOTHING;
ALTER TABLE {table} ADD COLUMN table_id integer;
UPDATE {table} AS r SET table_id = t.id FROM {tables} AS t WHERE t.name = r.table_name;
ALTER TABLE {table} ALTER COLUMN table_id SET NOT NULL;
ALTER TABLE {table} DROP COLUMN table_name;
ALTER TABLE {table} ADD PRIMARY KEY (table_id, key);
CREATE INDEX IF NOT EXISTS {created_index} ON {table} (table_id, created_at, key);
