"""Claimable sets in the spec layer, and the literal SQL each backend writes for them."""

from __future__ import annotations

import pytest

from airflow_atomic_store import SpecError
from airflow_atomic_store.spec import parse_where
from airflow_atomic_store.spec.claim_sets import covered_conditions, parse_claim_set
from airflow_atomic_store.store.postgres.statements import PostgresWhere, literal
from airflow_atomic_store.store.sql import WhereCompiler
from airflow_atomic_store.store.sqlite.statements import SqliteWhere

PENDING = {"field": "status", "operator": "equals", "value": "pending"}
OLD = {"field": "claimedAt", "operator": "lt", "value": "2025-01-01T00:00:00.000000Z"}


def test_a_set_covers_an_all_claim_holding_its_conditions_and_names_them():
    pending = parse_claim_set([PENDING], "all", "createdAt")
    claim = parse_where([OLD, PENDING])
    assert covered_conditions(pending, claim, "all") == frozenset({1})
    assert covered_conditions(pending, claim, "any") is None
    assert covered_conditions(pending, parse_where([OLD]), "all") is None


def test_conditions_are_the_same_only_when_their_json_is_the_same():
    one = parse_claim_set([{"field": "n", "operator": "equals", "value": 1}], "all", "createdAt")
    for other in (True, "1"):
        claim = parse_where([{"field": "n", "operator": "equals", "value": other}])
        assert covered_conditions(one, claim, "all") is None


def test_an_any_set_serves_only_the_same_any_claim():
    states = [PENDING, {"field": "status", "operator": "equals", "value": "retry"}]
    either = parse_claim_set(states, "any", "createdAt")
    assert covered_conditions(either, parse_where(states[::-1]), "any") == {0, 1}
    assert covered_conditions(either, parse_where(states[:1]), "all") is None


def test_a_set_is_named_by_what_it_holds_not_by_how_it_was_written():
    a = parse_claim_set([PENDING, {"field": "kind", "operator": "exists"}], "all", "createdAt")
    b = parse_claim_set([{"field": "kind", "operator": "exists"}, PENDING], "ALL", "created_at")
    assert a.index_name("atomic_store_rows") == b.index_name("atomic_store_rows")
    longest = a.index_name("t" * 48)
    assert len(longest) <= 63
    assert a.index_name("s") != parse_claim_set([PENDING], "all", "createdAt").index_name("s")


@pytest.mark.parametrize(
    "condition",
    [
        {"field": "n", "operator": "gt", "value": 1},
        {"field": "s", "operator": "contains", "value": "x"},
        {"field": "s", "operator": "equals", "value": [1]},
        {"field": "s", "operator": "equals", "value": 0.5},
        {"field": "s", "operator": "in", "value": []},
        {"field": "s", "operator": "in", "value": list(range(33))},
    ],
)
def test_a_set_holds_only_plain_comparisons_with_bounded_literals(condition):
    with pytest.raises(SpecError) as info:
        parse_claim_set([condition], "all", "createdAt")
    assert info.value.field == "where[0]"


def test_postgres_writes_a_value_as_a_placeholder_or_a_literal_in_the_same_place():
    """Each value's place is chosen by the operator, never found again in its text: a
    field named ``%s`` stays a quoted path, and every ``%`` of a literal is doubled."""
    compiler = WhereCompiler(PostgresWhere())
    where = parse_where([{"field": "%s", "operator": "ends_with", "value": "x%"}])
    statement, params = compiler.compile(where, "all")
    text = "jsonb_typeof((r.value -> '%%s')) = 'string' THEN right((r.value ->> '%%s'), "
    assert statement == f"((CASE WHEN {text}char_length(%(w0)s::text)) = %(w1)s::text END))"
    assert params == {"w0": "x%", "w1": "x%"}
    literal_where = compiler.literal_predicate(where, "all", "r.value")
    assert literal_where == f"((CASE WHEN {text}char_length('x%%'::text)) = 'x%%'::text END))"


def test_remembered_postgres_literals_keep_each_values_type():
    """Integers and strings are remembered; ``True == 1`` must not share a literal."""
    first = [literal(value) for value in (1, True, 1.0, "1", 1, True)]
    assert first == ["1", "true", "1.0", "'1'", "1", "true"]
    assert literal("50%") == "'50%%'" == literal("50%")


def test_sqlite_writes_a_value_as_a_placeholder_or_a_literal_in_the_same_place():
    """A ``?`` or ``:name`` in a quoted path is text, not a place for a value."""
    compiler = WhereCompiler(SqliteWhere())
    where = parse_where([{"field": "what?", "operator": "starts_with", "value": "it's ?"}])
    statement, params = compiler.compile(where, "all")
    text = "((json_type(r.value, '$.what?') = 'text' AND substr(json_extract(r.value, '$.what?'), "
    assert statement == f"{text}1, length(:w0)) = :w1))"
    assert params == {"w0": "it's ?", "w1": "it's ?"}
    literal_where = compiler.literal_predicate(where, "all", "r.value")
    assert literal_where == f"{text}1, length('it''s ?')) = 'it''s ?'))"


@pytest.mark.parametrize("dialect", [PostgresWhere(), SqliteWhere()], ids=["postgres", "sqlite"])
def test_a_claim_writes_exactly_the_predicate_its_set_index_holds(dialect):
    """The index predicate and the claim's covered condition are the same SQL text."""
    compiler = WhereCompiler(dialect)
    states = parse_where([{"field": "status", "operator": "in", "value": ["a", 1, None, True]}])
    predicate = compiler.literal_predicate(states, "all", "value")
    claim_sql, params = compiler.compile(states, "all", inline={0})
    assert params == {}
    assert claim_sql.replace("r.value", "value") == predicate
    assert ":w" not in predicate and "%(" not in predicate
