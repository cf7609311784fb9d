"""The PostgreSQL backend's claimable-set verbs: the sets' catalog and their indexes.

Apart from the row verbs (``backend.py``), which the backend declares with these
(``delegation.delegated``): they share its connection and ``where`` compiler.
"""

from __future__ import annotations

from airflow_atomic_store.spec.claim_sets import ClaimSet
from airflow_atomic_store.store.claim_sets import BuildRequest, StoredSet
from airflow_atomic_store.store.compiler import WhereCompiler
from airflow_atomic_store.store.postgres import claim_sets, schema, set_catalog
from airflow_atomic_store.store.postgres.connection import PostgresConnection


class PostgresSetVerbs:
    """Load, build, touch and drop one store's claimable sets, and its record index."""

    def __init__(
        self, connection: PostgresConnection, table_name: str, where: WhereCompiler
    ) -> None:
        self._connection = connection
        self._table_name = table_name
        self._where = where

    def load_claim_sets(self) -> list[StoredSet]:
        with self._connection.cursor(many_rows=True) as cur:
            return claim_sets.load(cur, schema.sets_table(self._table_name))

    def build_claim_set(self, request: BuildRequest) -> StoredSet | None:
        with self._connection.cursor() as cur:
            return claim_sets.build(cur, self._table_name, self._where, request)

    def build_in_progress(self, claim_set: ClaimSet) -> bool:
        with self._connection.cursor() as cur:
            return claim_sets.build_in_progress(cur, claim_set)

    def touch_claim_set(self, name: str) -> bool:
        if self._connection.read_only:
            return True
        with self._connection.cursor() as cur:
            return set_catalog.touch(cur, schema.sets_table(self._table_name), name)

    def drop_idle_claim_sets(self, idle_seconds: float) -> list[str]:
        if self._connection.read_only:
            return []
        with self._connection.cursor() as cur:
            return claim_sets.drop_idle(cur, self._table_name, idle_seconds)

    def ensure_record_index(self, *, timeout: float) -> bool:
        """The ``record_timestamp`` index, built the first time something orders by it.

        A read-only store builds nothing: it orders without the index.
        """
        if self._connection.read_only:
            return False
        name, create = schema.record_index(self._table_name)
        sets_table = schema.sets_table(self._table_name)
        with self._connection.cursor() as cur:
            if claim_sets.record_index_given_up(cur, sets_table, name):
                return False
            with claim_sets.build_lock(cur, wait=False) as held:
                if not held:
                    return False
                outcome = claim_sets.build_concurrently(
                    cur, self._table_name, name, create.decode(), timeout=timeout
                )
            claim_sets.record_index_gave_up(cur, sets_table, name, outcome, timeout)
        return outcome == "ready"

    def drop_claim_set(self, name: str) -> bool:
        with self._connection.cursor() as cur:
            return claim_sets.drop(cur, self._table_name, name)
