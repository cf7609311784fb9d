from __future__ import annotations

import pytest

from airflow_atomic_store.spec import OPERATORS, parse_where
from airflow_atomic_store.store.postgres.statements import PostgresWhere
from airflow_atomic_store.store.sql import WhereCompiler
from airflow_atomic_store.store.sqlite.statements import SqliteWhere

DIALECTS = {"postgres": (PostgresWhere, "%(w"), "sqlite": (SqliteWhere, ":w")}
SAMPLE_VALUES = [1, 2.5, "text", True, None, [1, "a"], {"k": 1}]


def sample_conditions():
    for name, operator in OPERATORS.items():
        for value in SAMPLE_VALUES:
            if operator.check_value(value) is None:
                yield {"field": "a.b[0]", "operator": name, "value": value}


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
@pytest.mark.parametrize("condition", list(sample_conditions()), ids=repr)
def test_every_placeholder_gets_exactly_one_bound_parameter(dialect, condition):
    where_class, placeholder = DIALECTS[dialect]
    sql, params = WhereCompiler(where_class()).compile(parse_where([condition]), "all")
    assert sql.count(placeholder) == len(params)


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_statements_are_cached_by_shape_not_by_value(dialect):
    compiler = WhereCompiler(DIALECTS[dialect][0]())
    first = parse_where([{"field": "status", "operator": "equals", "value": "pending"}])
    second = parse_where([{"field": "status", "operator": "equals", "value": "done"}])
    sql_1, params_1 = compiler.compile(first, "all")
    sql_2, params_2 = compiler.compile(second, "all")
    assert sql_1 == sql_2
    assert params_1 != params_2
    assert compiler.compile_shape.cache_info().hits == 1


def test_values_never_enter_postgres_statement_text():
    where = parse_where([{"field": "s", "operator": "equals", "value": "x'); DROP TABLE t; --"}])
    sql, _ = WhereCompiler(PostgresWhere()).compile(where, "all")
    assert "DROP" not in sql


def test_postgres_paths_are_driver_quoted_literals_with_percent_escaped():
    where = parse_where([{"field": "it's.%s", "operator": "exists"}])
    sql, params = WhereCompiler(PostgresWhere()).compile(where, "all")
    assert sql == "(((r.value -> 'it''s' -> '%%s') IS NOT NULL))"
    assert params == {}


def test_postgres_equality_is_the_bare_expression_an_index_can_serve():
    where = parse_where([{"field": "status", "operator": "equals", "value": "pending"}])
    sql, _ = WhereCompiler(PostgresWhere()).compile(where, "all")
    assert sql == "(((r.value -> 'status') = %(w0)s::jsonb))"


def test_sqlite_paths_are_quoted_by_sqlite_itself():
    where = parse_where([{"field": "it's", "operator": "exists"}])
    sql, _ = WhereCompiler(SqliteWhere()).compile(where, "all")
    assert "json_type(r.value, '$.it''s')" in sql
