"""SQL dialects: everything that differs between PostgreSQL and SQLite lives here."""
