"""Selections run on an open connection: reads, and the claim as one ``UPDATE``."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from airflow_atomic_store import timestamps
from airflow_atomic_store.spec.values import dumps
from airflow_atomic_store.store.backend import ClaimSetGone, decoded, in_claim_order
from airflow_atomic_store.store.claim_sets import ChosenSet
from airflow_atomic_store.store.requests import ClaimRequest, Row, Selection
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
    connection: sqlite3.Connection, sql: StatementCompiler, selection: Selection
) -> list[Row]:
    statement, params = sql.compile_select("select", selection)
    rows = fetch(connection, statement, (*params, selection.limit), selection.claim_set)
    return decoded(rows)


def delete_in_sql(
    connection: sqlite3.Connection, sql: StatementCompiler, selection: Selection
) -> list[Row]:
    """A delete-claim as one ``DELETE … WHERE rowid IN (the selection) RETURNING``, re-sorted."""
    kind = f"delete_{selection.ordering.column}"
    statement, params = sql.compile_select(kind, selection)
    rows = fetch(connection, statement, (*params, selection.limit), selection.claim_set)
    return in_claim_order(rows, selection.ordering)


def claim_in_sql(
    connection: sqlite3.Connection,
    sql: StatementCompiler,
    request: ClaimRequest,
    fields: tuple[str, ...],
) -> list[Row]:
    """The claim as ``UPDATE … WHERE rowid IN (the selection) RETURNING``, re-sorted.

    Ordered by ``record_timestamp`` the old value is needed for the order
    and RETURNING shows only the new one, so the rows are picked first.
    """
    selection, claim_set = request.selection, request.selection.claim_set
    mutation = json_set_sql(fields)
    head = (*json_set_params(request.mutations), timestamps.now())
    if selection.ordering.column == "created_at":
        statement, params = sql.compile_select("claim_update", selection, mutation)
        rows = fetch(connection, statement, (*head, *params, selection.limit), claim_set)
        return in_claim_order(rows, selection.ordering)
    statement, params = sql.compile_select("pick", selection)
    picked = [row[0] for row in fetch(connection, statement, (*params, selection.limit), claim_set)]
    if not picked:
        return []
    position = {rowid: number for number, rowid in enumerate(picked)}
    rows = connection.execute(
        sql.statement("update_picked", mutation=mutation), (*head, dumps(picked))
    ).fetchall()
    rows.sort(key=lambda row: position[row[0]])
    return decoded([(key, value) for _, key, value in rows])
