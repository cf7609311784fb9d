"""The PostgreSQL backend: connection, locking, statements, schema and catalog probes."""
