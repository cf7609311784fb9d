"""Both SQL backends agree with the reference evaluator, case by case.

``CORPUS`` is a set of stored values chosen to hit every type rule: numbers
as ints and floats, numeric-looking strings, booleans next to 0/1, null next
to missing, arrays, objects, unicode, LIKE wildcards and odd field names.
For each ``WHERE_CASES`` entry the whole corpus is run through the backend
twice — as an ``atomic_update`` guard on every row and as one ``atomic_claim``
over the table — and each outcome must be exactly what ``evaluate`` says.
Some cases also pin the expected keys by hand, so the oracle itself is held
to the documented semantics (docs/reference/where.md). ``MUTATION_CASES`` do the
same for ``apply`` (docs/reference/mutations.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore, MutationError, SpecError
from airflow_atomic_store.spec import apply, evaluate, parse_mutations, parse_where
from tests.support.physical import give_all_rows_the_same_timestamps

ODD_FIELDS = {
    "it's": 1,
    'say "hi"': 2,
    "semi;colon": 3,
    "back\\slash": 4,
    "$": 5,
    "*": 6,
    "ключ": 7,
    "with space": 8,
    "%s": 9,
    "?": 10,
    "'); DROP TABLE atomic_store_rows; --": 11,
}

CORPUS: dict[str, dict[str, Any]] = {
    "int-1": {
        "a": 1,
        "status": "pending",
        "items": [1, 2, 3],
        "n": {"b": {"c": 1}},
        "ts": "2024-01-01T00:00:00.000000Z",
        "s": "héllo wörld",
    },
    "float-1": {
        "a": 1.0,
        "status": "done",
        "items": [{"id": 1}, {"id": 2}],
        "n": {"b": {"c": 1.5}},
        "ts": "2024-06-01T12:30:00.500000Z",
        "s": "日本語テキスト",
    },
    "float-2.5": {"a": 2.5, "items": [], "n": {"b": {}}, "ts": "2023-12-31T23:59:59.999999Z"},
    "negative": {"a": -3, "items": ["x", "y"], "n": {"b": {"c": "1"}}, "s": "x_y"},
    "zero": {"a": 0, "items": [0], "n": {"b": {"c": 0}}, "s": "100%_done"},
    "big-int": {"a": 9007199254740993, "items": [None]},
    "string-1": {"a": "1", "s": "1", "status": "pending"},
    "string-abc": {"a": "abc", "s": "abcdef", "items": ["abc", "bc"]},
    "empty-string": {"a": "", "s": ""},
    "true": {"a": True, "items": [True]},
    "false": {"a": False, "items": [False, 0]},
    "null": {"a": None, "n": None, "s": None},
    "missing": {"other": 1},
    "array": {"a": [1, 2], "items": [[1, 2], {"x": 1}]},
    "object": {"a": {"x": 1, "y": [1, 2]}, "n": {"b": {"c": [1]}}},
    "emoji": {"a": "🙂 smile", "s": "🙂", "items": ["🙂"]},
    "backslash": {"a": "C:\\temp\\new", "s": "a\\b"},
    "odd-fields": {**ODD_FIELDS, "a": "odd"},
}


def cond(field: str, operator: str, *value: Any) -> dict[str, Any]:
    condition: dict[str, Any] = {"field": field, "operator": operator}
    if value:
        (condition["value"],) = value
    return condition


def case(
    case_id: str,
    where: list[dict[str, Any]],
    match: str = "all",
    expected: set[str] | None = None,
) -> Any:
    return pytest.param(where, match, expected, id=case_id)


ALL_KEYS = set(CORPUS)
HAS_A = ALL_KEYS - {"missing"}

WHERE_CASES = [
    # equals: numbers by value, never a string or boolean in disguise
    case("equals-1", [cond("a", "equals", 1)], expected={"int-1", "float-1"}),
    case("equals-1.0", [cond("a", "equals", 1.0)], expected={"int-1", "float-1"}),
    case("equals-string-1", [cond("a", "equals", "1")], expected={"string-1"}),
    case("equals-true", [cond("a", "equals", True)], expected={"true"}),
    case("equals-false", [cond("a", "equals", False)], expected={"false"}),
    case("equals-0", [cond("a", "equals", 0)], expected={"zero"}),
    case("equals-null", [cond("a", "equals", None)], expected={"null"}),
    case("equals-empty-string", [cond("a", "equals", "")], expected={"empty-string"}),
    case("equals-big-int", [cond("a", "equals", 9007199254740993)], expected={"big-int"}),
    case("equals-big-int-neighbour", [cond("a", "equals", 9007199254740992)], expected=set()),
    case("equals-array", [cond("a", "equals", [1, 2])], expected={"array"}),
    case("equals-array-other-order", [cond("a", "equals", [2, 1])], expected=set()),
    case(
        "equals-object-any-key-order",
        [cond("a", "equals", {"y": [1, 2], "x": 1})],
        expected={"object"},
    ),
    case("equals-object-float-inside", [cond("a", "equals", {"x": 1.0, "y": [1.0, 2]})]),
    case("equals-unicode", [cond("s", "equals", "日本語テキスト")], expected={"float-1"}),
    case("equals-emoji", [cond("a", "equals", "🙂 smile")], expected={"emoji"}),
    case("equals-backslash", [cond("a", "equals", "C:\\temp\\new")], expected={"backslash"}),
    # not_equals: exact negation, so missing fields satisfy it
    case("not-equals-1", [cond("a", "not_equals", 1)], expected=ALL_KEYS - {"int-1", "float-1"}),
    case("not-equals-true", [cond("a", "not_equals", True)], expected=ALL_KEYS - {"true"}),
    case("not-equals-null", [cond("a", "not_equals", None)], expected=ALL_KEYS - {"null"}),
    case("not-equals-string-1", [cond("a", "not_equals", "1")]),
    case("not-equals-array", [cond("a", "not_equals", [1, 2])]),
    # ordering: numbers with numbers, strings with strings, nothing else
    case("gt-0", [cond("a", "gt", 0)], expected={"int-1", "float-1", "float-2.5", "big-int"}),
    case("gte-1", [cond("a", "gte", 1)], expected={"int-1", "float-1", "float-2.5", "big-int"}),
    case("lt-1", [cond("a", "lt", 1)], expected={"negative", "zero"}),
    case("lte-1.0", [cond("a", "lte", 1.0)], expected={"int-1", "float-1", "negative", "zero"}),
    case("gt-negative-float", [cond("a", "gt", -3.5)]),
    case("gt-string", [cond("a", "gt", "a")], expected={"string-abc", "emoji", "odd-fields"}),
    case("lt-string", [cond("a", "lt", "abc")]),
    case("gte-string-1", [cond("a", "gte", "1")]),
    case("lte-empty-string", [cond("a", "lte", "")], expected={"empty-string"}),
    case(
        "lt-timestamp",
        [cond("ts", "lt", "2024-03-01T00:00:00.000000Z")],
        expected={"int-1", "float-2.5"},
    ),
    case("gte-timestamp-exact", [cond("ts", "gte", "2024-06-01T12:30:00.500000Z")]),
    case("gt-nested-number", [cond("n.b.c", "gt", 1)], expected={"float-1"}),
    case("lte-nested-number", [cond("n.b.c", "lte", 1)], expected={"int-1", "zero"}),
    # in / not_in: membership by the same equality
    case("in-mixed", [cond("a", "in", [1, "abc"])], expected={"int-1", "float-1", "string-abc"}),
    case("in-true", [cond("a", "in", [True])], expected={"true"}),
    case("in-null", [cond("a", "in", [None])], expected={"null"}),
    case("in-array", [cond("a", "in", [[1, 2], {"x": 1, "y": [1, 2]}])]),
    case("in-empty-list", [cond("a", "in", [])], expected=set()),
    case("in-float", [cond("a", "in", [2.5, 0.0])], expected={"float-2.5", "zero"}),
    case("not-in-mixed", [cond("a", "not_in", [1, "abc"])]),
    case("not-in-empty-list", [cond("a", "not_in", [])], expected=ALL_KEYS),
    case("not-in-false", [cond("a", "not_in", [False, None])]),
    # contains: substring of strings, membership of arrays
    case("contains-substring", [cond("s", "contains", "bc")], expected={"string-abc"}),
    case("contains-unicode", [cond("s", "contains", "wör")], expected={"int-1"}),
    case("contains-emoji", [cond("s", "contains", "🙂")], expected={"emoji"}),
    case("contains-percent-literal", [cond("s", "contains", "%")], expected={"zero"}),
    case(
        "contains-underscore-literal", [cond("s", "contains", "_")], expected={"negative", "zero"}
    ),
    case("contains-backslash-literal", [cond("s", "contains", "\\")], expected={"backslash"}),
    case("contains-array-member", [cond("items", "contains", 2)], expected={"int-1"}),
    case("contains-array-member-1.0", [cond("items", "contains", 1.0)]),
    case("contains-array-string", [cond("items", "contains", "abc")], expected={"string-abc"}),
    case("contains-array-object", [cond("items", "contains", {"id": 1})], expected={"float-1"}),
    case("contains-array-array", [cond("items", "contains", [1, 2])], expected={"array"}),
    case("contains-array-true", [cond("items", "contains", True)], expected={"true"}),
    case("contains-array-null", [cond("items", "contains", None)]),
    case("contains-array-zero", [cond("items", "contains", 0)], expected={"zero", "false"}),
    case("contains-on-a-number", [cond("a", "contains", 1)]),
    case("contains-empty-string", [cond("s", "contains", "")]),
    case("not-contains-substring", [cond("s", "not_contains", "bc")]),
    case("not-contains-array-member", [cond("items", "not_contains", 2)]),
    # starts_with / ends_with: strings only, wildcards are literal
    case("starts-with", [cond("s", "starts_with", "abc")], expected={"string-abc"}),
    case("starts-with-unicode", [cond("s", "starts_with", "héllo")], expected={"int-1"}),
    case("starts-with-percent", [cond("s", "starts_with", "100%")], expected={"zero"}),
    case("starts-with-wildcard-is-literal", [cond("s", "starts_with", "%")], expected=set()),
    case("starts-with-underscore-is-literal", [cond("s", "starts_with", "a_c")], expected=set()),
    case("starts-with-empty", [cond("s", "starts_with", "")]),
    case("starts-with-on-numbers", [cond("a", "starts_with", "1")], expected={"string-1"}),
    case("ends-with", [cond("s", "ends_with", "def")], expected={"string-abc"}),
    case("ends-with-emoji", [cond("a", "ends_with", "smile")], expected={"emoji"}),
    case("ends-with-backslash-b", [cond("s", "ends_with", "\\b")], expected={"backslash"}),
    case("ends-with-underscore-is-literal", [cond("s", "ends_with", "_done")], expected={"zero"}),
    # exists / not_exists: presence, null included
    case("exists", [cond("a", "exists")], expected=HAS_A),
    case("not-exists", [cond("a", "not_exists")], expected={"missing"}),
    case("exists-null-field", [cond("n", "exists")]),
    case("exists-nested", [cond("n.b.c", "exists")]),
    case("not-exists-nested", [cond("n.b.c", "not_exists")]),
    case("exists-through-null", [cond("n.b", "exists")]),
    case("exists-array-index", [cond("items[0]", "exists")]),
    case("exists-array-index-holding-null", [cond("items[0]", "exists")]),
    case("exists-array-index-out-of-range", [cond("items[2]", "exists")], expected={"int-1"}),
    case("not-exists-array-index", [cond("items[1]", "not_exists")]),
    # paths: nesting, indexes, indexes into objects, index on non-arrays
    case("nested-equals", [cond("n.b.c", "equals", 1)], expected={"int-1"}),
    case("nested-equals-string", [cond("n.b.c", "equals", "1")], expected={"negative"}),
    case("nested-equals-array", [cond("n.b.c", "equals", [1])], expected={"object"}),
    case("index-equals", [cond("items[0]", "equals", 1)], expected={"int-1"}),
    case("index-then-field", [cond("items[1].id", "equals", 2)], expected={"float-1"}),
    case("index-index", [cond("items[0][1]", "equals", 2)], expected={"array"}),
    case("index-on-a-string", [cond("s[0]", "equals", "a")], expected=set()),
    case("index-on-a-string-is-not-the-string", [cond("s[0]", "equals", "abcdef")], expected=set()),
    case("index-on-a-number-is-not-the-number", [cond("a[0]", "equals", 1)], expected={"array"}),
    case("index-on-scalars-does-not-exist", [cond("a[0]", "exists")], expected={"array"}),
    case(
        "index-on-scalars-is-not-exists",
        [cond("a[0]", "not_exists")],
        expected=ALL_KEYS - {"array"},
    ),
    case("index-on-an-object", [cond("n[0]", "exists")], expected=set()),
    case("field-on-an-array", [cond("items.id", "exists")], expected=set()),
    case("not-equals-through-missing-parent", [cond("n.b.c.d", "not_equals", 1)]),
    # odd field names are data, not syntax
    case("odd-field-quote", [cond("it's", "equals", 1)], expected={"odd-fields"}),
    case("odd-field-double-quote", [cond('say "hi"', "equals", 2)], expected={"odd-fields"}),
    case("odd-field-semicolon", [cond("semi;colon", "gt", 2)], expected={"odd-fields"}),
    case("odd-field-backslash", [cond("back\\slash", "equals", 4)], expected={"odd-fields"}),
    case("odd-field-dollar", [cond("$", "equals", 5)], expected={"odd-fields"}),
    case("odd-field-star", [cond("*", "exists")], expected={"odd-fields"}),
    case("odd-field-cyrillic", [cond("ключ", "equals", 7)], expected={"odd-fields"}),
    case("odd-field-space", [cond("with space", "equals", 8)], expected={"odd-fields"}),
    case("odd-field-percent-s", [cond("%s", "equals", 9)], expected={"odd-fields"}),
    case("odd-field-question-mark", [cond("?", "equals", 10)], expected={"odd-fields"}),
    case(
        "odd-field-sql-fragment",
        [cond("'); DROP TABLE atomic_store_rows; --", "equals", 11)],
        expected={"odd-fields"},
    ),
    # match modes and empty filters
    case("empty-where-all", [], "all", expected=ALL_KEYS),
    case("empty-where-any", [], "any", expected=ALL_KEYS),
    case(
        "all-two-conditions",
        [cond("status", "equals", "pending"), cond("a", "equals", 1)],
        expected={"int-1"},
    ),
    case(
        "any-two-conditions",
        [cond("status", "equals", "pending"), cond("a", "equals", True)],
        "any",
        expected={"int-1", "string-1", "true"},
    ),
    case("any-with-not-exists", [cond("a", "not_exists"), cond("a", "lt", 0)], "any"),
    case("all-contradiction", [cond("a", "gt", 1), cond("a", "lt", 1)], expected=set()),
    case("all-type-mismatch-both-ways", [cond("a", "gte", 0), cond("a", "gte", "")]),
]

WHERE_MUTATIONS = [{"field": "guardPassed", "operation": "increment", "value": 1}]


def dump(value: Any) -> str:
    """Type-strict comparison form: ``1`` and ``1.0`` and ``True`` all differ."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


@pytest.mark.parametrize(("where", "match", "expected"), WHERE_CASES)
def test_update_guard_agrees_with_the_reference_evaluator(
    store: AtomicStore, where: list[dict[str, Any]], match: str, expected: set[str] | None
) -> None:
    conditions = parse_where(where)
    mutations = parse_mutations(WHERE_MUTATIONS)
    accepted = {key for key, value in CORPUS.items() if evaluate(conditions, match, value)}
    if expected is not None:
        assert accepted == expected, (
            "the reference evaluator disagrees with docs/reference/where.md"
        )
    for key, value in CORPUS.items():
        store.put("guards", key, value)
    disagreements = []
    for key, value in CORPUS.items():
        result = store.atomic_update(
            "guards", key, where=where, match=match, mutations=WHERE_MUTATIONS
        )
        if key in accepted:
            want = {"updated": True, "value": apply(mutations, value), "key": key}
        else:
            want = {"updated": False, "value": None, "key": key}
        stored = store.get("guards", key)
        if dump(result) != dump(want) or dump(stored) != dump(want["value"] or value):
            disagreements.append(f"{key}: store gave {result}, stored {stored}; expected {want}")
    assert not disagreements, "\n".join(disagreements)


@pytest.mark.parametrize(("where", "match", "expected"), WHERE_CASES)
def test_claim_selects_exactly_the_rows_the_reference_evaluator_accepts(
    store: AtomicStore, where: list[dict[str, Any]], match: str, expected: set[str] | None
) -> None:
    conditions = parse_where(where)
    accepted = {key for key, value in CORPUS.items() if evaluate(conditions, match, value)}
    for key, value in CORPUS.items():
        store.put("queue", key, value)
    mark = [{"field": "claimedHere", "operation": "set", "value": True}]
    result = store.atomic_claim("queue", where=where, match=match, mutations=mark, limit=1000)
    claimed = {row["key"]: row["value"] for row in result["claimed"]}
    assert set(claimed) == accepted
    assert result["count"] == len(accepted)
    assert [row["key"] for row in result["claimed"]] == [k for k in CORPUS if k in accepted]
    for key, value in claimed.items():
        assert dump(value) == dump({**CORPUS[key], "claimedHere": True})
    query_keys = {row["key"] for row in store.query("queue", where=where, match=match)}
    assert query_keys == accepted


def mset(field: str, value: Any) -> dict[str, Any]:
    return {"field": field, "operation": "set", "value": value}


def minc(field: str, value: Any) -> dict[str, Any]:
    return {"field": field, "operation": "increment", "value": value}


MUTATION_CASES = [
    pytest.param({"a": 1}, [mset("b", "x")], id="set-new-top-level"),
    pytest.param({"a": 1}, [mset("a", "now a string")], id="set-replaces-with-another-type"),
    pytest.param({"a": 1}, [mset("a", None)], id="set-null"),
    pytest.param({"a": 1}, [mset("a", [1, {"b": None}])], id="set-array"),
    pytest.param({"a": 1}, [mset("a", {"deep": {"er": [1.5]}})], id="set-object"),
    pytest.param({"a": 1}, [mset("a", 1.0)], id="set-float-one"),
    pytest.param({"a": 1}, [mset("a", True)], id="set-true"),
    pytest.param({}, [mset("x.y.z", 1)], id="set-creates-parents"),
    pytest.param({"x": {"keep": 1}}, [mset("x.y.z", 1)], id="set-creates-inner-parents"),
    pytest.param({"x": {"y": {"z": 0, "w": 1}}}, [mset("x.y.z", 2)], id="set-nested-existing"),
    pytest.param({"x": None}, [mset("x.y", 1)], id="set-through-null"),
    pytest.param({"x": "text"}, [mset("x.y", 1)], id="set-through-a-string"),
    pytest.param({"x": 5}, [mset("x.y", 1)], id="set-through-a-number"),
    pytest.param({"x": [1, 2]}, [mset("x.y", 1)], id="set-field-of-an-array"),
    pytest.param({"items": [1, 2]}, [mset("items[0]", 9)], id="set-array-element"),
    pytest.param({"items": [1, 2]}, [mset("items[5]", 9)], id="set-array-element-out-of-range"),
    pytest.param({"items": [{"n": 1}]}, [mset("items[0].n", 2)], id="set-inside-array-element"),
    pytest.param({"s": "x"}, [mset("ключ", "🙂")], id="set-unicode"),
    pytest.param({}, [mset("it's", 1), mset('say "hi"', 2)], id="set-odd-field-names"),
    pytest.param({}, [mset("'); DROP TABLE atomic_store_rows; --", 1)], id="set-sql-fragment-name"),
    pytest.param({"s": "x"}, [mset("s", "it's; \\ %s ? $1")], id="set-odd-string-value"),
    pytest.param({"n": 1}, [minc("n", 2)], id="increment-int"),
    pytest.param({"n": 1}, [minc("n", -5)], id="increment-negative"),
    pytest.param({"n": 1}, [minc("n", 0.5)], id="increment-int-by-float"),
    pytest.param({"n": 1.5}, [minc("n", 1)], id="increment-float-by-int"),
    pytest.param({"n": 1.0}, [minc("n", 1)], id="increment-float-one"),
    pytest.param({"n": 2.5}, [minc("n", 0.25)], id="increment-float"),
    pytest.param({"n": 2.5}, [minc("n", 0.5)], id="increment-float-to-a-whole-number"),
    pytest.param({"n": 9007199254740993}, [minc("n", 1)], id="increment-big-int"),
    pytest.param({}, [minc("n", 3)], id="increment-missing"),
    pytest.param({"n": None}, [minc("n", 3)], id="increment-null"),
    pytest.param({}, [minc("a.b.n", 1)], id="increment-missing-parents"),
    pytest.param({"items": [1, 2]}, [minc("items[1]", 1)], id="increment-array-element"),
    pytest.param({"n": "5"}, [minc("n", 1)], id="increment-string"),
    pytest.param({"n": True}, [minc("n", 1)], id="increment-boolean"),
    pytest.param({"n": {"x": 1}}, [minc("n", 1)], id="increment-object"),
    pytest.param({"n": [1]}, [minc("n", 1)], id="increment-array"),
    pytest.param({"n": 1}, [mset("n", 10), minc("n", 1)], id="set-then-increment"),
    pytest.param({"n": 1}, [minc("n", 1), mset("n", "x")], id="increment-then-set"),
    pytest.param({"n": 1}, [minc("n", 1), minc("n", 1)], id="increment-twice"),
    pytest.param({"n": 1}, [mset("n", "x"), minc("n", 1)], id="set-string-then-increment"),
    pytest.param({"a": {"b": 1}}, [mset("a", {}), mset("a.c", 2)], id="set-object-then-child"),
    # Top-level fields mutated once each are merged in plain SQL on PostgreSQL,
    # integer increments summed inline: the edges of that path.
    pytest.param({"n": 2**63 - 2}, [minc("n", 1)], id="increment-to-int64-max"),
    pytest.param({"n": 2**63 - 1}, [minc("n", 1)], id="increment-past-int64-max"),
    pytest.param({"n": -(2**63)}, [minc("n", -1)], id="increment-past-int64-min"),
    pytest.param({"n": 5}, [minc("n", 2**63 - 1)], id="increment-by-int64-max-overflows"),
    pytest.param({"n": -5}, [minc("n", 2**63 - 1)], id="increment-negative-by-int64-max"),
    pytest.param({"n": 1e300}, [minc("n", 1)], id="increment-huge-float-by-int"),
    pytest.param(
        {"n": 1, "m": 2.5, "s": "x"},
        [minc("n", 1), mset("s", "y"), minc("m", 1), minc("new", -2), mset("z", None)],
        id="sets-and-increments-of-distinct-fields",
    ),
    pytest.param({"n": 1, "s": "x"}, [minc("n", 1), minc("s", 1)], id="distinct-fields-one-fails"),
    pytest.param(
        {"100%": 1, "it's": 2, "%s": 3},
        [minc("100%", 1), minc("it's", 1), minc("%s", 1)],
        id="increment-odd-field-names",
    ),
    pytest.param({"n": 1, "a": {"n": 1}}, [minc("n", 1), minc("a.n", 1)], id="top-and-nested"),
]


def oracle(stored: dict[str, Any], mutations: list[dict[str, Any]]) -> Any:
    try:
        return apply(parse_mutations(mutations), stored)
    except MutationError:
        return MutationError


@pytest.mark.parametrize(("stored", "mutations"), MUTATION_CASES)
def test_update_mutations_agree_with_the_reference_apply(
    store: AtomicStore, stored: dict[str, Any], mutations: list[dict[str, Any]]
) -> None:
    want = oracle(stored, mutations)
    store.put("t", "k", stored)
    if want is MutationError:
        with pytest.raises(MutationError):
            store.atomic_update("t", "k", mutations=mutations)
        assert dump(store.get("t", "k")) == dump(stored)
        return
    result = store.atomic_update("t", "k", mutations=mutations)
    assert dump(result) == dump({"updated": True, "value": want, "key": "k"})
    assert dump(store.get("t", "k")) == dump(want)


@pytest.mark.parametrize(("stored", "mutations"), MUTATION_CASES)
def test_upsert_conflict_mutations_agree_with_the_reference_apply(
    store: AtomicStore, stored: dict[str, Any], mutations: list[dict[str, Any]]
) -> None:
    want = oracle(stored, mutations)
    store.put("t", "k", stored)
    if want is MutationError:
        with pytest.raises(MutationError):
            store.atomic_upsert("t", "k", insert_value={"fresh": True}, mutations=mutations)
        assert dump(store.get("t", "k")) == dump(stored)
        return
    result = store.atomic_upsert("t", "k", insert_value={"fresh": True}, mutations=mutations)
    assert dump(result) == dump({"inserted": False, "value": want, "key": "k"})
    assert dump(store.get("t", "k")) == dump(want)


def test_every_operator_is_covered_by_the_conformance_table() -> None:
    from airflow_atomic_store.spec import OPERATORS

    used = {c["operator"] for param in WHERE_CASES for c in param.values[0]}
    assert set(OPERATORS) <= used


def test_every_mutation_case_parses() -> None:
    for param in MUTATION_CASES:
        try:
            parse_mutations(param.values[1])
        except SpecError as exc:  # pragma: no cover - a broken case, not a store bug
            pytest.fail(f"{param.id}: {exc}")


COLLATION_CORPUS = {
    "lower-a": {"s": "a"},
    "upper-b": {"s": "B"},
    "upper-z": {"s": "Z"},
    "accented": {"s": "é"},
    "digit": {"s": "1"},
    "space-first": {"s": " z"},
    "lower-ab": {"s": "ab"},
    "upper-ab": {"s": "AB"},
}


@pytest.fixture(scope="module")
def linguistic_store(postgres_server: Any) -> Iterator[AtomicStore]:
    """A store in a database whose default collation is ICU en-US (where 'a' < 'B')."""
    postgres_server.create_database("linguistic", icu_locale="en-US")
    try:
        with AtomicStore(postgres_server.url_for("linguistic")) as store:
            yield store
    finally:
        postgres_server.drop_database("linguistic")


@pytest.mark.postgres
@pytest.mark.parametrize("operator", ["lt", "lte", "gt", "gte"])
@pytest.mark.parametrize("bound", ["a", "B", "Z", "é", "ab"])
def test_string_order_is_code_point_order_even_under_a_linguistic_collation(
    linguistic_store: AtomicStore, operator: str, bound: str
) -> None:
    """Production databases rarely use the C collation; comparisons must not follow theirs."""
    store, table = linguistic_store, f"{operator} {bound}"
    for key, value in COLLATION_CORPUS.items():
        store.put(table, key, value)
    where = [cond("s", operator, bound)]
    accepted = {
        key for key, value in COLLATION_CORPUS.items() if evaluate(parse_where(where), "all", value)
    }
    assert {row["key"] for row in store.query(table, where=where)} == accepted
    claimed = store.atomic_claim(table, where=where, limit=1000)
    assert {row["key"] for row in claimed["claimed"]} == accepted


@pytest.mark.postgres
@pytest.mark.parametrize("direction", ["asc", "desc"])
def test_rows_of_one_instant_come_in_code_point_key_order_even_under_a_linguistic_collation(
    linguistic_store: AtomicStore, postgres_server: Any, direction: str
) -> None:
    """Ties on the order column go by key as the oracle breaks them, by code point.

    So which rows a claim's limit takes, and the order a query lists them in, do
    not depend on the database's locale (under en-US ``'a' < 'B'``).
    """
    store, table = linguistic_store, f"ties {direction}"
    keys = ["a", "B", "Z", "é", "1", "ab", "AB"]
    for key in keys:
        store.put(table, key, {"status": "pending"})
    give_all_rows_the_same_timestamps(postgres_server.url_for("linguistic"), table)
    expected = sorted(keys, reverse=direction == "desc")
    assert [row["key"] for row in store.query(table, direction=direction)] == expected
    pending = [cond("status", "equals", "pending")]
    first = store.atomic_claim(table, where=pending, direction=direction, limit=3)
    assert [row["key"] for row in first["claimed"]] == expected[:3]
    rest = store.atomic_claim(table, where=pending, direction=direction, limit=1000)
    assert [row["key"] for row in rest["claimed"]] == expected[3:]
