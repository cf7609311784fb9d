-- Which parts of this release's schema are missing where unqualified names resolve:
-- (the named tables that are missing, whether any named function is).
-- Reads the catalogs with the statement's snapshot, not to_regclass's cache (see schema.py).
WITH visible AS (
    SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = ANY (current_schemas(false))
)
SELECT
    ARRAY(
        SELECT name FROM unnest(%(tables)s::text[]) AS name
        WHERE NOT EXISTS (
            SELECT FROM pg_catalog.pg_class
            WHERE relname = name AND relkind IN ('r', 'p')
              AND relnamespace IN (SELECT oid FROM visible)
        )
    ),
    (
        SELECT count(DISTINCT proname) FROM pg_catalog.pg_proc
        WHERE proname = ANY (%(functions)s) AND pronamespace IN (SELECT oid FROM visible)
    ) < cardinality(%(functions)s::text[])
