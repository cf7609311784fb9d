-- Reading and recording a store's schema version (store/migrations.py; connection.py
-- runs them). Holes in braces are identifiers quoted by psycopg; values are bound.

-- name: version
SELECT max(version) FROM {migrations}

-- name: record
INSERT INTO {migrations} (version, name) VALUES (%(version)s, %(name)s)

-- name: rows_table
-- Under the schema lock, before migrating: who this role is, whether it may alter the
-- rows table and create beside it (a member of its owner, CREATE on its schema), and
-- whether the table has version 1's key column. Read from the catalogs with the
-- statement's own snapshot, as schema_probe.sql reads them; the first table of that
-- name on the search path, as an unqualified name resolves.
SELECT current_user,
    pg_has_role(c.relowner, 'USAGE') AND has_schema_privilege(c.relnamespace, 'CREATE'),
    EXISTS (
        SELECT FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = c.oid AND a.attname = %(key_column)s AND NOT a.attisdropped
    )
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = %(table)s AND c.relkind IN ('r', 'p')
    AND n.nspname = ANY (current_schemas(false))
ORDER BY array_position(current_schemas(false), n.nspname::text)
LIMIT 1

-- name: readers
-- The roles (None: PUBLIC) that may read the rows table but do not own it: a new
-- _migrations table of an existing store is readable by them too, so that workers
-- which open the store keep opening it once the owner has migrated it.
SELECT DISTINCT CASE WHEN a.grantee = 0 THEN NULL ELSE pg_get_userbyid(a.grantee) END
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace,
    aclexplode(c.relacl) a
WHERE c.relname = %(table)s AND c.relkind IN ('r', 'p')
    AND n.nspname = ANY (current_schemas(false))
    AND a.privilege_type = 'SELECT' AND a.grantee <> c.relowner
