"""The validator under fuzz: any raw input is a SpecError before I/O, or the oracle's result.

The generators of tests/property/strategies.py draw raw arguments, valid most of
the time and otherwise malformed (wrong types, unknown names, bad paths, values
that are not storable JSON, oversized keys). Each example breaks at most one
argument, so about half the calls are valid and exercise the result (with
numbers at the edges: huge, tiny, int64) and the others probe one way of being
wrong at a time. Each call is first
made on a store whose database cannot be reached: that decides, before any I/O,
whether the input is rejected (SpecError) or accepted (the store then fails to
connect). The same call on a live store must then raise the same SpecError and
change nothing, or return exactly what the reference evaluator predicts (a
MutationError included). Anything else, a database error above all, fails.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_atomic_store import AtomicStore, MutationError, SpecError, StoreUnavailableError
from airflow_atomic_store.spec import (
    CLAIM_LIMIT,
    QUERY_LIMIT,
    apply,
    check_object,
    evaluate,
    is_number,
    parse_key,
    parse_limit,
    parse_match,
    parse_mutations,
    parse_ordering,
    parse_return_fields,
    parse_table,
    parse_where,
    project,
)
from tests.property.strategies import (
    documents,
    edge_documents,
    edge_mutation_lists,
    execution_ids,
    keys,
    mutation_lists,
    raw_directions,
    raw_execution_ids,
    raw_keys,
    raw_limits,
    raw_matches,
    raw_mutation_lists,
    raw_order_bys,
    raw_return_fields,
    raw_tables,
    raw_values,
    raw_wheres,
    wheres,
)
from tests.reliability.support import fuzz, snapshot

_tables = itertools.count()

SHORT, LONG = 40, 2000
NEIGHBOUR = "~neighbour"  # a row beside the one under test, which must never change


def fresh_table() -> str:
    return f"fuzz-{next(_tables)}"


def same_json(left: Any, right: Any) -> bool:
    """JSON equality that also tells an integer from a float (``1 != 1.0`` here)."""
    if is_number(left) and is_number(right):
        return isinstance(left, float) == isinstance(right, float) and left == right
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(same_json, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same_json(left[k], right[k]) for k in left)
    return type(left) is type(right) and left == right


def offline_verdict(offline: AtomicStore, call: Callable[[AtomicStore], Any]) -> SpecError | None:
    """The SpecError the input earns before any I/O, or None when it is accepted."""
    try:
        call(offline)
    except SpecError as rejected:
        return rejected
    except StoreUnavailableError:
        return None  # valid: the store went on to connect, and could not
    raise AssertionError("a call on an unreachable store returned a result")


def assert_rejected_alike(
    store: AtomicStore, call: Callable[[AtomicStore], Any], verdict: SpecError, tables: list[str]
) -> None:
    before = snapshot(store, *tables)
    with pytest.raises(SpecError) as raised:
        call(store)
    assert raised.value.field == verdict.field
    assert str(raised.value) == str(verdict)
    assert snapshot(store, *tables) == before, "a rejected call changed the store"


any_documents = documents | edge_documents
valid_return_fields = st.none() | st.lists(keys, max_size=3)


def valid_mutations(document: dict[str, Any]) -> st.SearchStrategy[Any]:
    return mutation_lists(document) | edge_mutation_lists(document)


def draw_arguments(
    data: st.DataObject, arguments: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]]
) -> dict[str, Any]:
    """``{name: (valid, raw)}`` → drawn values, at most one of them from its raw strategy."""
    names = list(arguments)
    broken = data.draw(st.sampled_from([None] * len(names) + names), label="broken")
    return {
        name: data.draw(raw if name == broken else valid, label=name)
        for name, (valid, raw) in arguments.items()
    }


def seed_rows(store: AtomicStore, table: str, rows: list[dict[str, Any]]) -> list[str]:
    """Put ``rows`` under keys ``k0``, ``k1``… in that order (so created in key order)."""
    keys = [f"k{i}" for i in range(len(rows))]
    for key, document in zip(keys, rows, strict=True):
        store.put(table, key, document)
    return keys


def oracle_selection(
    kwargs: dict[str, Any], keys: list[str], rows: list[dict[str, Any]], bounds: tuple[int, int]
) -> list[str]:
    """The keys a claim or query with ``kwargs`` must return, by the reference evaluator."""
    where, match = parse_where(kwargs["where"]), parse_match(kwargs["match"])
    ordering = parse_ordering(kwargs["order_by"], kwargs["direction"])
    limit = parse_limit(kwargs["limit"], bounds)
    indexes = range(len(rows))[::-1] if ordering.direction == "desc" else range(len(rows))
    return [keys[i] for i in indexes if evaluate(where, match, rows[i])][:limit]


def table_and_key(table: Any, key: Any) -> tuple[str, str]:
    """Where the test seeds its rows: the call's table and key when valid, else fresh ones."""
    try:
        return parse_table(table), parse_key(key)
    except SpecError:
        return fresh_table(), "row"


TABLE = (st.builds(fresh_table), raw_tables)
KEY = (st.just("row"), raw_keys)
MATCH = (st.sampled_from(["all", "any"]), raw_matches)
RETURN_FIELDS = (valid_return_fields, raw_return_fields)
ORDER_BY = (st.sampled_from(["createdAt", "recordTimestamp"]), raw_order_bys)
DIRECTION = (st.sampled_from(["asc", "desc"]), raw_directions)


@fuzz(SHORT, LONG)
@given(data=st.data())
def test_raw_update_is_rejected_before_io_or_agrees_with_the_oracle(
    shared_store: AtomicStore, offline_store: AtomicStore, data: st.DataObject
) -> None:
    document = data.draw(any_documents, label="document")
    kwargs = draw_arguments(
        data,
        {
            "table": TABLE,
            "key": KEY,
            "where": (wheres(document), raw_wheres(document)),
            "match": MATCH,
            "mutations": (valid_mutations(document), raw_mutation_lists(document)),
            "return_fields": RETURN_FIELDS,
        },
    )
    seed_table, seed_key = table_and_key(kwargs["table"], kwargs["key"])

    def call(store: AtomicStore) -> Any:
        return store.atomic_update(**kwargs)

    shared_store.put(seed_table, seed_key, document)
    shared_store.put(seed_table, NEIGHBOUR, document)
    verdict = offline_verdict(offline_store, call)
    if verdict is not None:
        assert_rejected_alike(shared_store, call, verdict, [seed_table])
        return

    where, match = parse_where(kwargs["where"]), parse_match(kwargs["match"])
    mutations = parse_mutations(kwargs["mutations"])
    fields = parse_return_fields(kwargs["return_fields"])
    before = snapshot(shared_store, seed_table)
    if not evaluate(where, match, document):
        assert call(shared_store) == {"updated": False, "value": None, "key": seed_key}
        assert snapshot(shared_store, seed_table) == before
        return
    try:
        expected = apply(mutations, document)
    except MutationError:
        with pytest.raises(MutationError):
            call(shared_store)
        assert snapshot(shared_store, seed_table) == before
        return
    result = call(shared_store)
    assert result["updated"] is True and result["key"] == seed_key
    assert same_json(result["value"], project(expected, fields))
    assert same_json(shared_store.get(seed_table, seed_key), expected)
    assert shared_store.get(seed_table, NEIGHBOUR) == document


@fuzz(SHORT, LONG)
@given(data=st.data(), rows=st.lists(any_documents, min_size=1, max_size=5))
def test_raw_claim_is_rejected_before_io_or_agrees_with_the_oracle(
    shared_store: AtomicStore,
    offline_store: AtomicStore,
    data: st.DataObject,
    rows: list[dict[str, Any]],
) -> None:
    kwargs = draw_arguments(
        data,
        {
            "table": TABLE,
            "where": (wheres(rows[0]), raw_wheres(rows[0])),
            "match": MATCH,
            "mutations": (st.none() | valid_mutations(rows[0]), raw_mutation_lists(rows[0])),
            "order_by": ORDER_BY,
            "direction": DIRECTION,
            "limit": (st.integers(*CLAIM_LIMIT), raw_limits),
            "return_fields": RETURN_FIELDS,
            "execution_id": (execution_ids, raw_execution_ids),
        },
    )
    seed_table, _ = table_and_key(kwargs["table"], "row")
    mutations = kwargs["mutations"]

    def call(store: AtomicStore) -> Any:
        return store.atomic_claim(**kwargs)

    keys = seed_rows(shared_store, seed_table, rows)
    verdict = offline_verdict(offline_store, call)
    if verdict is not None:
        assert_rejected_alike(shared_store, call, verdict, [seed_table])
        return

    fields = parse_return_fields(kwargs["return_fields"])
    documents_by_key = dict(zip(keys, rows, strict=True))
    picked = oracle_selection(kwargs, keys, rows, CLAIM_LIMIT)

    execution_id = kwargs["execution_id"]
    if mutations is None:  # the default claim mutations; claimedAt is checked apart
        defaults = [{"field": "status", "operation": "set", "value": "in_flight"}]
        if execution_id is not None:
            defaults.append({"field": "claimedBy", "operation": "set", "value": execution_id})
        parsed = parse_mutations(defaults)
    else:
        parsed = parse_mutations(mutations)
    before = snapshot(shared_store, seed_table)
    try:
        expected = {key: apply(parsed, documents_by_key[key]) for key in picked}
    except MutationError:
        with pytest.raises(MutationError):
            call(shared_store)
        assert snapshot(shared_store, seed_table) == before, "a failed claim wrote something"
        return
    result = call(shared_store)
    assert [row["key"] for row in result["claimed"]] == picked
    assert result["count"] == len(picked)
    stored = {row["key"]: row["value"] for row in shared_store.query(seed_table, limit=100)}
    for row in result["claimed"]:
        assert same_json(row["value"], project(stored[row["key"]], fields))
    for key in keys:
        value = dict(stored[key])
        if key not in expected:
            assert same_json(value, documents_by_key[key]), "an unclaimed row changed"
            continue
        if mutations is None:
            assert isinstance(value.pop("claimedAt"), str)
            if execution_id is None:
                assert value.pop("claimedBy").startswith("claim-")
        assert same_json(value, expected[key])


@fuzz(SHORT, LONG)
@given(data=st.data(), exists=st.booleans())
def test_raw_upsert_is_rejected_before_io_or_agrees_with_the_oracle(
    shared_store: AtomicStore, offline_store: AtomicStore, data: st.DataObject, exists: bool
) -> None:
    document = data.draw(any_documents, label="document")
    kwargs = draw_arguments(
        data,
        {
            "table": TABLE,
            "key": KEY,
            "insert_value": (any_documents, raw_values),
            "mutations": (st.just([]) | valid_mutations(document), raw_mutation_lists(document)),
            "return_fields": RETURN_FIELDS,
        },
    )
    seed_table, seed_key = table_and_key(kwargs["table"], kwargs["key"])
    insert_value = kwargs["insert_value"]

    def call(store: AtomicStore) -> Any:
        return store.atomic_upsert(**kwargs)

    if exists:
        shared_store.put(seed_table, seed_key, document)
    shared_store.put(seed_table, NEIGHBOUR, document)
    verdict = offline_verdict(offline_store, call)
    if verdict is not None:
        assert_rejected_alike(shared_store, call, verdict, [seed_table])
        return

    inserted_value = check_object(insert_value, "insert_value")
    mutations = parse_mutations(kwargs["mutations"])
    fields = parse_return_fields(kwargs["return_fields"])
    before = snapshot(shared_store, seed_table)
    if not exists:
        expected, inserted = inserted_value, True
    elif not mutations:
        expected, inserted = document, False
    else:
        try:
            expected, inserted = apply(mutations, document), False
        except MutationError:
            with pytest.raises(MutationError):
                call(shared_store)
            assert snapshot(shared_store, seed_table) == before
            return
    result = call(shared_store)
    assert result["inserted"] is inserted and result["key"] == seed_key
    assert same_json(result["value"], project(expected, fields))
    assert same_json(shared_store.get(seed_table, seed_key), expected)
    assert shared_store.get(seed_table, NEIGHBOUR) == document


@fuzz(SHORT, LONG)
@given(data=st.data(), rows=st.lists(any_documents, max_size=5))
def test_raw_query_is_rejected_before_io_or_agrees_with_the_oracle(
    shared_store: AtomicStore,
    offline_store: AtomicStore,
    data: st.DataObject,
    rows: list[dict[str, Any]],
) -> None:
    first = rows[0] if rows else None
    kwargs = draw_arguments(
        data,
        {
            "table": TABLE,
            "where": (wheres(first), raw_wheres(first)),
            "match": MATCH,
            "order_by": ORDER_BY,
            "direction": DIRECTION,
            "limit": (st.integers(*QUERY_LIMIT), raw_limits | st.sampled_from([10_001])),
        },
    )
    seed_table, _ = table_and_key(kwargs["table"], "row")

    def call(store: AtomicStore) -> Any:
        return store.query(**kwargs)

    keys = seed_rows(shared_store, seed_table, rows)
    verdict = offline_verdict(offline_store, call)
    if verdict is not None:
        assert_rejected_alike(shared_store, call, verdict, [seed_table])
        return

    expected = oracle_selection(kwargs, keys, rows, QUERY_LIMIT)
    found = call(shared_store)
    assert [row["key"] for row in found] == expected
    for row in found:
        assert same_json(row["value"], rows[int(row["key"][1:])])


@fuzz(SHORT, LONG)
@given(data=st.data())
def test_raw_rows_are_rejected_before_io_or_stored_exactly(
    shared_store: AtomicStore, offline_store: AtomicStore, data: st.DataObject
) -> None:
    arguments = draw_arguments(
        data,
        {
            "table": TABLE,
            "key": KEY,
            "value": (any_documents, raw_values | st.dictionaries(st.text(max_size=3), raw_values)),
        },
    )
    table, key, value = arguments["table"], arguments["key"], arguments["value"]
    seed_table, _ = table_and_key(table, key)

    def put(store: AtomicStore) -> Any:
        return store.put(table, key, value)

    def get(store: AtomicStore) -> Any:
        return store.get(table, key)

    def delete(store: AtomicStore) -> Any:
        return store.delete(table, key)

    shared_store.put(seed_table, NEIGHBOUR, {"n": 1})
    verdicts = {call: offline_verdict(offline_store, call) for call in (put, get, delete)}
    for call, verdict in verdicts.items():
        if verdict is not None:
            assert_rejected_alike(shared_store, call, verdict, [seed_table])
    if verdicts[put] is None:
        put(shared_store)
        assert same_json(get(shared_store), check_object(value, "value"))
        assert delete(shared_store) is True
    if verdicts[get] is None:
        assert get(shared_store) is None
        assert delete(shared_store) is False
    assert shared_store.get(seed_table, NEIGHBOUR) == {"n": 1}
