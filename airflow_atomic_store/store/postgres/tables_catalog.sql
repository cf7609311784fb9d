-- The logical tables of one store and their ids (statements.py: each statement finds its own).
-- Rows carry the id, not the name: every index of the rows table then leads with a
-- fixed-width integer, compared as one, where a text column in front cost every
-- index insert a string comparison and the columns after it their cached offsets
-- (docs/backends.md, "Table ids"). An id is never reused or changed, so ids come from
-- a sequence of their own, not an identity column: TRUNCATE … RESTART IDENTITY of the
-- catalog and DROP TABLE leave it, and no "orders" id of before a reset can become a
-- new "payroll"'s. It starts at a random point (schema.py), so that even a catalog
-- whose sequence was dropped too deals out ids of another range than before.
-- Holes in braces: identifiers quoted by psycopg, filled by schema.schema_tables.
CREATE SEQUENCE IF NOT EXISTS {ids} AS integer START WITH {start};
CREATE TABLE IF NOT EXISTS {tables} (
    id integer PRIMARY KEY DEFAULT nextval({ids_literal}),
    name text COLLATE "C" NOT NULL UNIQUE
);
