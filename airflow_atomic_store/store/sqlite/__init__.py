"""The SQLite backend: one file, one writer at a time, JSON through json_set/json_extract."""
