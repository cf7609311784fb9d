"""The PostgreSQL backend's static statements (``queries.sql``), for one store's tables."""

from __future__ import annotations

from psycopg import sql

from airflow_atomic_store.store.named_queries import named_queries


class NamedQueries:
    """Each statement of ``queries.sql`` with the store's identifiers quoted in, as bytes."""

    def __init__(self, **identifiers: sql.Composable) -> None:
        self._statements = {
            name: sql.SQL(statement).format(**identifiers).as_string(None).encode()
            for name, statement in named_queries(__package__).items()
        }

    def __getitem__(self, name: str) -> bytes:
        return self._statements[name]
