"""Selections run on an open connection: reads, and the claim as one ``UPDATE``."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from airflow_atomic_store import timestamps
from airflow_atomic_store.spec import Condition, Mutation, Ordering
from airflow_atomic_store.spec.values import dumps
from airflow_atomic_store.store.backend import ClaimSetGone, Row, decoded, in_claim_order
from airflow_atomic_store.store.claim_sets import ChosenSet
from airflow_atomic_store.store.sqlite.mutations import (
    json_set_params,
    json_set_sql,
)
from airflow_atomic_store.store.sqlite.statements import StatementCompiler


def fetch(
    connection: sqlite3.Connection,
    statement: str,
    params: Sequence[Any],
    claim_set: ChosenSet | None,
) -> list[Any]:
    """All rows of a statement that may name a claimable set's index, which may be gone."""
    try:
        return connection.execute(statement, params).fetchall()
    except sqlite3.OperationalError as exc:
        if claim_set is not None and "no such index" in str(exc):
            raise ClaimSetGone(claim_set.name) from exc
        raise


def select(
    connection: sqlite3.Connection,
    sql: StatementCompiler,
    table: str,
    where: Sequence[Condition],
    match: str,
    ordering: Ordering,
    limit: int,
    claim_set: ChosenSet | None = None,
) -> list[Row]:
    statement, params = sql.compile_select("select", table, where, match, ordering, claim_set)
    rows = fetch(connection, statement, (*params, limit), claim_set)
    return decoded(rows)


def claim_in_sql(
    connection: sqlite3.Connection,
    sql: StatementCompiler,
    table: str,
    where: Sequence[Condition],
    match: str,
    ordering: Ordering,
    limit: int,
    mutations: Sequence[Mutation],
    fields: tuple[str, ...],
    claim_set: ChosenSet | None,
) -> list[Row]:
    """The claim as ``UPDATE … WHERE rowid IN (the selection) RETURNING``, re-sorted.

    Ordered by ``record_timestamp`` the old value is needed for the order
    and RETURNING shows only the new one, so the rows are picked first.
    """
    mutation = json_set_sql(fields)
    head = (*json_set_params(mutations), timestamps.now())
    if ordering.column == "created_at":
        statement, params = sql.compile_select(
            "claim_update", table, where, match, ordering, claim_set, mutation
        )
        rows = fetch(connection, statement, (*head, *params, limit), claim_set)
        return in_claim_order(rows, ordering)
    statement, params = sql.compile_select("pick", table, where, match, ordering, claim_set)
    picked = [row[0] for row in fetch(connection, statement, (*params, limit), claim_set)]
    if not picked:
        return []
    position = {rowid: number for number, rowid in enumerate(picked)}
    rows = connection.execute(
        sql.statement("update_picked", mutation=mutation), (*head, dumps(picked))
    ).fetchall()
    rows.sort(key=lambda row: position[row[0]])
    return decoded([(key, value) for _, key, value in rows])
