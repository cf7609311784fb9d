"""Hostile text is data, bad input is a typed error naming the field, on both live backends.

Fills the gaps left by tests/integration/test_hostile_input.py (hostile keys, table
names and filter values) and tests/unit/test_validation.py (errors before I/O on an
unreachable store): hostile *field names* through every primitive, 100 KB strings,
NUL and non-JSON values wherever a value enters, size and nesting limits, and bad
options, each checked on a live store that must be left exactly as it was.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore, SpecError
from airflow_atomic_store.spec import apply, parse_mutations
from airflow_atomic_store.spec.conditions import MAX_CONDITIONS
from airflow_atomic_store.spec.options import MAX_KEY_BYTES, MAX_TABLE_BYTES
from airflow_atomic_store.spec.values import MAX_DEPTH
from tests.reliability.support import snapshot
from tests.support.specs import INCREMENT as BUMP

_cases = itertools.count()

#: Field names that are valid path segments but mean something to SQL, to a
#: driver's placeholder parser or to a JSON-path language.
FIELD_NAMES = [
    "it's",
    'say "hi"',
    '"',
    "''",
    "back\\slash",
    "\\",
    "\\u0041",
    "%s",
    "%(name)s",
    "%%",
    "%",
    "?",
    "?1",
    "$1",
    ":name",
    "$",
    "@",
    "*",
    "**",
    "#",
    "#-1",
    "last",
    "strict $",
    "lax $",
    "->",
    "->>",
    "#>>",
    "{a,b}",
    "a,b",
    "::jsonb",
    "' || '",
    "x'); DROP TABLE atomic_store_rows; --",
    '"; DELETE FROM atomic_store_rows; --',
    "' OR '1'='1",
    "/* comment */",
    "-- comment",
    "{}",
    "null",
    "true",
    "0",
    "-1",
    "1e3",
    " padded ",
    "a b",
    "日本語",
    "🙂",
    "e\u0301",
    "\u2028",
    "\ufeff",
]

SENTINEL_TABLE = "sentinel"


def fresh_table() -> str:
    return f"hostile-{next(_cases)}"


@pytest.fixture
def guarded(shared_store: AtomicStore) -> Callable[[], None]:
    """Seed a sentinel table; returns a check that it (and nothing else) is unchanged."""
    shared_store.put(SENTINEL_TABLE, "row", {"untouched": True, "n": 0})
    shared_store.put(SENTINEL_TABLE, "other", {"status": "pending"})
    before = snapshot(shared_store, SENTINEL_TABLE)

    def check() -> None:
        assert snapshot(shared_store, SENTINEL_TABLE) == before

    return check


# -- hostile field names ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name", FIELD_NAMES, ids=[f"field-{i:02d}" for i in range(len(FIELD_NAMES))]
)
def test_hostile_field_names_address_exactly_their_field_in_every_primitive(
    shared_store: AtomicStore, guarded: Callable[[], None], name: str
) -> None:
    store, table = shared_store, fresh_table()
    document = {name: 1, "nest": {name: {name: "deep"}}, "list": [{name: True}], "status": "p"}
    decoy = {"other": 1, "nest": {"x": {name: "deep"}}, "list": [{}], "status": "p"}
    store.put(table, "row", document)
    store.put(table, "decoy", decoy)

    for field, operator, value in [
        (name, "equals", 1),
        (name, "exists", None),
        (f"nest.{name}.{name}", "equals", "deep"),
        (f"nest.{name}.{name}", "starts_with", "de"),
        (f"list[0].{name}", "equals", True),
        (f"list[0].{name}", "in", [False, True]),
    ]:
        where = [{"field": field, "operator": operator, "value": value}]
        assert [row["key"] for row in store.query(table, where=where)] == ["row"], field
        negated = [{"field": field, "operator": "not_exists"}]
        assert [row["key"] for row in store.query(table, where=negated)] == ["decoy"], field

    mutations = [
        {"field": name, "operation": "increment", "value": 2},
        {"field": f"nest.{name}.{name}", "operation": "set", "value": name},
        {"field": f"new.{name}", "operation": "set", "value": {name: [name]}},
        {"field": f"list[0].{name}", "operation": "set", "value": False},
    ]
    expected = apply(parse_mutations(mutations), document)
    updated = store.atomic_update(
        table,
        "row",
        where=[{"field": name, "operator": "equals", "value": 1}],
        mutations=mutations,
    )
    assert updated == {"updated": True, "value": expected, "key": "row"}
    assert store.get(table, "row") == expected
    assert store.get(table, "decoy") == decoy

    claimed = store.atomic_claim(
        table,
        where=[{"field": f"new.{name}", "operator": "exists"}],
        mutations=[{"field": name, "operation": "set", "value": "claimed"}],
        return_fields=[name, "status"],
    )
    assert claimed == {
        "claimed": [{"key": "row", "value": {name: "claimed", "status": "p"}}],
        "count": 1,
    }

    upserted = store.atomic_upsert(
        table,
        "seeded",
        insert_value={name: name},
        mutations=[{"field": f"counts.{name}", "operation": "increment", "value": 1}],
    )
    assert upserted["value"] == {name: name}
    upserted = store.atomic_upsert(
        table,
        "seeded",
        insert_value={},
        mutations=[{"field": f"counts.{name}", "operation": "increment", "value": 1}],
    )
    assert upserted["value"] == {name: name, "counts": {name: 1}}
    assert store.get(table, "decoy") == decoy
    guarded()


def test_json_path_syntax_in_a_field_name_is_only_a_name(
    shared_store: AtomicStore, guarded: Callable[[], None]
) -> None:
    store, table = shared_store, fresh_table()
    store.put(table, "row", {"$": {"a": 1}, "a": 2, "*": 3, "last": [4], "@": {"$": 5}})
    for field, value in [("$.a", 1), ("*", 3), ("last[0]", 4), ("@.$", 5)]:
        where = [{"field": field, "operator": "equals", "value": value}]
        assert [row["key"] for row in store.query(table, where=where)] == ["row"], field
    for field in ["$.b", "a.a", "last[1]"]:
        where = [{"field": field, "operator": "exists"}]
        assert store.query(table, where=where) == [], field
    guarded()


# -- very long strings --------------------------------------------------------------------


def incompressible(size: int, seed: int) -> str:
    """``size`` characters of random letters, digits and punctuation (no compression help)."""
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'\"\\%?$:;-_ "
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(size))


HUGE = 100_000


def test_100_kb_values_field_names_and_filters_are_stored_and_compared_exactly(
    shared_store: AtomicStore, guarded: Callable[[], None]
) -> None:
    store, table = shared_store, fresh_table()
    text, name = incompressible(HUGE, 1), incompressible(HUGE, 2).replace(".", "")
    document = {"text": text, name: {"inner": text}, "list": [text]}
    store.put(table, "row", document)
    store.put(table, "decoy", {"text": text[:-1] + "!", "list": []})
    assert store.get(table, "row") == document

    for field, operator, value in [
        ("text", "equals", text),
        ("text", "ends_with", text[-HUGE // 2 :]),
        ("text", "in", [text]),
        (f"{name}.inner", "starts_with", text),
        ("list", "contains", text),
    ]:
        where = [{"field": field, "operator": operator, "value": value}]
        assert [row["key"] for row in store.query(table, where=where)] == ["row"], operator

    execution_id = incompressible(HUGE, 3)
    mutations = [{"field": f"{name}.copy", "operation": "set", "value": text + text}]
    updated = store.atomic_update(table, "row", mutations=mutations)
    assert updated["value"] == apply(parse_mutations(mutations), document)
    claimed = store.atomic_claim(
        table, where=[{"field": name, "operator": "exists"}], execution_id=execution_id
    )
    assert claimed["count"] == 1
    assert claimed["claimed"][0]["value"]["claimedBy"] == execution_id
    assert store.get(table, "row")[name]["copy"] == text + text
    guarded()


def test_keys_and_table_names_at_the_size_limit_are_stored_exactly(
    shared_store: AtomicStore, guarded: Callable[[], None]
) -> None:
    rng = random.Random(4)
    two_byte_letters = "éèêëàâäôöûüçñßøåæ"
    key = "".join(rng.choice(two_byte_letters) for _ in range(MAX_KEY_BYTES // 2))
    table = "".join(rng.choice(two_byte_letters) for _ in range(MAX_TABLE_BYTES // 2))
    assert len(key.encode()) == MAX_KEY_BYTES
    assert len(table.encode()) == MAX_TABLE_BYTES
    shared_store.put(table, key, {"k": key})
    assert shared_store.atomic_upsert(table, key, insert_value={})["value"] == {"k": key}
    assert [row["key"] for row in shared_store.query(table)] == [key]
    claimed = shared_store.atomic_claim(table, execution_id=key)
    assert claimed["claimed"][0]["value"]["claimedBy"] == key
    guarded()


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.put("t", incompressible(HUGE, 5), {}), "key"),
        (lambda s: s.put(incompressible(HUGE, 6), "k", {}), "table"),
        (lambda s: s.get("t", "x" * (MAX_KEY_BYTES + 1)), "key"),
        (
            lambda s: s.atomic_update(
                "t", "é" * 513, mutations={"field": "a", "op": "set", "value": 1}
            ),
            "key",
        ),
        (lambda s: s.atomic_claim("ä" * (MAX_TABLE_BYTES // 2 + 1)), "table"),
        (lambda s: s.atomic_upsert("t" * (MAX_TABLE_BYTES + 1), "k", insert_value={}), "table"),
        (lambda s: s.delete("t", 10**5000), "key"),
        (lambda s: s.put("t", 2**63, {}), "key"),
    ],
    ids=[
        "100kb-key",
        "100kb-table",
        "key-one-byte-over",
        "multibyte-key-over",
        "multibyte-table-over",
        "table-one-byte-over",
        "integer-key-with-5000-digits",
        "integer-key-beyond-64-bits",
    ],
)
def test_oversized_keys_and_table_names_are_spec_errors(
    shared_store: AtomicStore,
    guarded: Callable[[], None],
    call: Callable[[AtomicStore], Any],
    field: str,
) -> None:
    with pytest.raises(SpecError) as raised:
        call(shared_store)
    assert raised.value.field == field
    guarded()


def test_integer_keys_within_64_bits_are_their_decimal_text(
    shared_store: AtomicStore, guarded: Callable[[], None]
) -> None:
    table = fresh_table()
    shared_store.put(table, -(2**63), {"n": 1})
    assert shared_store.get(table, str(-(2**63))) == {"n": 1}
    guarded()


# -- bad values, typed errors naming the field ----------------------------------------------


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def cyclic() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = value
    return value


BAD_VALUES: dict[str, tuple[Callable[[AtomicStore, str], Any], str]] = {
    # NUL and lone surrogates wherever text enters
    "nul-in-nested-string": (lambda s, t: s.put(t, "k", {"a": ["ok", "x\x00"]}), "value.a[1]"),
    "nul-in-object-key": (lambda s, t: s.put(t, "k", {"a": {"b\x00": 1}}), "value.a"),
    "nul-in-insert-value": (
        lambda s, t: s.atomic_upsert(t, "k", insert_value={"\x00": 1}),
        "insert_value",
    ),
    "nul-in-set-value": (
        lambda s, t: s.atomic_update(
            t, "k", mutations=[{"field": "a", "op": "set", "value": "\x00"}]
        ),
        "mutations[0].value",
    ),
    "nul-in-upsert-mutation": (
        lambda s, t: s.atomic_upsert(
            t, "k", insert_value={}, mutations=[{"field": "a", "op": "set", "value": ["\x00"]}]
        ),
        "mutations[0].value[0]",
    ),
    "nul-in-in-list": (
        lambda s, t: s.query(t, where=[{"field": "a", "operator": "in", "value": ["a", "\x00"]}]),
        "where[0].value[1]",
    ),
    "nul-in-execution-id": (lambda s, t: s.atomic_claim(t, execution_id="run\x00"), "execution_id"),
    "surrogate-in-execution-id": (
        lambda s, t: s.atomic_claim(t, execution_id="\ud800"),
        "execution_id",
    ),
    "surrogate-in-value": (lambda s, t: s.put(t, "k", {"a": "\udfff"}), "value.a"),
    "surrogate-in-key": (lambda s, t: s.put(t, "\ud800", {}), "key"),
    "nul-in-return-field": (
        lambda s, t: s.atomic_claim(t, return_fields=["a\x00"]),
        "return_fields",
    ),
    # values that are not JSON objects
    "put-none": (lambda s, t: s.put(t, "k", None), "value"),
    "put-number": (lambda s, t: s.put(t, "k", 5), "value"),
    "put-boolean": (lambda s, t: s.put(t, "k", True), "value"),
    "put-pairs": (lambda s, t: s.put(t, "k", [("a", 1)]), "value"),
    "insert-none": (lambda s, t: s.atomic_upsert(t, "k", insert_value=None), "insert_value"),
    "insert-text": (lambda s, t: s.atomic_upsert(t, "k", insert_value='{"a": 1}'), "insert_value"),
    # values that are not JSON at all
    "non-string-object-key": (lambda s, t: s.put(t, "k", {"a": {1: "x"}}), "value.a"),
    "bytes": (lambda s, t: s.put(t, "k", {"a": b"x"}), "value.a"),
    "set-of-values": (
        lambda s, t: s.atomic_update(
            t, "k", mutations=[{"field": "a", "op": "set", "value": {1, 2}}]
        ),
        "mutations[0].value",
    ),
    "integer-beyond-64-bits-in-list": (
        lambda s, t: s.put(t, "k", {"a": [1, -(2**63) - 1]}),
        "value.a[1]",
    ),
    # non-finite floats
    "negative-infinity-nested": (
        lambda s, t: s.put(t, "k", {"a": {"b": float("-inf")}}),
        "value.a.b",
    ),
    "nan-in-insert-value-list": (
        lambda s, t: s.atomic_upsert(t, "k", insert_value={"a": [float("nan")]}),
        "insert_value.a[0]",
    ),
    "infinity-in-where-in-list": (
        lambda s, t: s.query(
            t, where=[{"field": "a", "operator": "in", "value": [1, float("inf")]}]
        ),
        "where[0].value[1]",
    ),
    "increment-by-negative-infinity": (
        lambda s, t: s.atomic_update(
            t, "k", mutations=[{"field": "n", "op": "increment", "value": float("-inf")}]
        ),
        "mutations[0].value",
    ),
    "nan-in-claim-mutation": (
        lambda s, t: s.atomic_claim(
            t, mutations=[{"field": "n", "op": "set", "value": [float("nan")]}]
        ),
        "mutations[0].value[0]",
    ),
    # increments by something that is not a number
    "increment-by-false": (
        lambda s, t: s.atomic_update(
            t, "k", mutations=[BUMP[0], {"field": "n", "op": "increment", "value": False}]
        ),
        "mutations[1].value",
    ),
    "increment-by-none": (
        lambda s, t: s.atomic_upsert(
            t, "k", insert_value={}, mutations=[{"field": "n", "op": "increment", "value": None}]
        ),
        "mutations[0].value",
    ),
    "increment-by-list": (
        lambda s, t: s.atomic_claim(t, mutations=[{"field": "n", "op": "increment", "value": [1]}]),
        "mutations[0].value",
    ),
    "increment-by-numeric-text": (
        lambda s, t: s.atomic_claim(
            t, mutations=[{"field": "n", "op": "increment", "value": "-1"}]
        ),
        "mutations[0].value",
    ),
    # nesting
    "too-deep-value": (
        lambda s, t: s.put(t, "k", nested(MAX_DEPTH + 2)),
        "value" + ".a" * (MAX_DEPTH + 1),
    ),
    "deep-beyond-recursion-limit": (
        lambda s, t: s.put(t, "k", nested(5000)),
        "value" + ".a" * (MAX_DEPTH + 1),
    ),
    "too-deep-where-value": (
        lambda s, t: s.query(
            t, where=[{"field": "a", "operator": "equals", "value": nested(3000)}]
        ),
        "where[0].value" + ".a" * (MAX_DEPTH + 1),
    ),
    "too-deep-set-value": (
        lambda s, t: s.atomic_update(
            t, "k", mutations=[{"field": "a", "op": "set", "value": [nested(3000)]}]
        ),
        "mutations[0].value[0]" + ".a" * MAX_DEPTH,
    ),
    "cyclic-value": (lambda s, t: s.put(t, "k", cyclic()), "value" + ".self" * (MAX_DEPTH + 1)),
}


@pytest.mark.parametrize(("call", "field"), BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_bad_values_are_spec_errors_naming_the_field_and_change_nothing(
    shared_store: AtomicStore,
    guarded: Callable[[], None],
    call: Callable[[AtomicStore, str], Any],
    field: str,
) -> None:
    table = fresh_table()
    shared_store.put(table, "k", {"n": 1, "status": "pending"})
    before = snapshot(shared_store, table)
    with pytest.raises(SpecError) as raised:
        call(shared_store, table)
    assert raised.value.field == field
    assert snapshot(shared_store, table) == before
    guarded()


def test_values_at_the_nesting_limit_are_stored_exactly(
    shared_store: AtomicStore, guarded: Callable[[], None]
) -> None:
    table = fresh_table()
    deepest = nested(MAX_DEPTH + 1)  # the top-level object plus MAX_DEPTH levels below it
    shared_store.put(table, "k", deepest)
    assert shared_store.get(table, "k") == deepest
    guarded()


# -- bad options -----------------------------------------------------------------------------

BAD_OPTIONS: dict[str, tuple[Callable[[AtomicStore, str], Any], str]] = {
    "claim-limit-none": (lambda s, t: s.atomic_claim(t, limit=None), "limit"),
    "claim-limit-whole-float": (lambda s, t: s.atomic_claim(t, limit=10.0), "limit"),
    "claim-limit-huge": (lambda s, t: s.atomic_claim(t, limit=10**20), "limit"),
    "claim-limit-sql": (lambda s, t: s.atomic_claim(t, limit="1; DROP TABLE x"), "limit"),
    "query-limit-negative": (lambda s, t: s.query(t, limit=-1), "limit"),
    "query-limit-over": (lambda s, t: s.query(t, limit=10_001), "limit"),
    "query-limit-fraction": (lambda s, t: s.query(t, limit=1.5), "limit"),
    "order-by-sql": (
        lambda s, t: s.atomic_claim(t, order_by="created_at; DROP TABLE x"),
        "order_by",
    ),
    "order-by-value-path": (lambda s, t: s.query(t, order_by="value->>'priority'"), "order_by"),
    "order-by-list": (lambda s, t: s.atomic_claim(t, order_by=["createdAt"]), "order_by"),
    "order-by-none": (lambda s, t: s.query(t, order_by=None), "order_by"),
    "direction-sql": (lambda s, t: s.atomic_claim(t, direction="asc, key DESC"), "direction"),
    "direction-none": (lambda s, t: s.query(t, direction=None), "direction"),
    "match-sql": (
        lambda s, t: s.query(t, where=[{"field": "n", "op": "exists"}], match="all OR 1=1"),
        "match",
    ),
    "operator-sql": (
        lambda s, t: s.atomic_update(
            t, "k", where=[{"field": "n", "operator": "= 1 OR 1=1", "value": 1}], mutations=BUMP
        ),
        "where[0].operator",
    ),
    "operator-uppercase": (
        lambda s, t: s.query(t, where=[{"field": "n", "operator": "EQUALS", "value": 1}]),
        "where[0].operator",
    ),
    "operator-list": (
        lambda s, t: s.query(t, where=[{"field": "n", "operator": ["equals"], "value": 1}]),
        "where[0].operator",
    ),
    "operation-sql": (
        lambda s, t: s.atomic_update(
            t, "k", mutations=[{"field": "n", "operation": "set = 1 --", "value": 1}]
        ),
        "mutations[0].operation",
    ),
    "too-many-conditions": (
        lambda s, t: s.query(t, where=[{"field": "n", "op": "exists"}] * (MAX_CONDITIONS + 1)),
        "where",
    ),
    "too-many-conditions-in-claim": (
        lambda s, t: s.atomic_claim(
            t, where=[{"field": "n", "op": "gt", "value": 0}] * 1000, match="any"
        ),
        "where",
    ),
    "return-fields-number": (
        lambda s, t: s.atomic_update(t, "k", mutations=BUMP, return_fields=5),
        "return_fields",
    ),
}


@pytest.mark.parametrize(("call", "field"), BAD_OPTIONS.values(), ids=BAD_OPTIONS.keys())
def test_bad_options_are_spec_errors_naming_the_field_and_change_nothing(
    shared_store: AtomicStore,
    guarded: Callable[[], None],
    call: Callable[[AtomicStore, str], Any],
    field: str,
) -> None:
    table = fresh_table()
    shared_store.put(table, "k", {"n": 1, "status": "pending"})
    before = snapshot(shared_store, table)
    with pytest.raises(SpecError) as raised:
        call(shared_store, table)
    assert raised.value.field == field
    assert raised.value.problem
    assert snapshot(shared_store, table) == before
    guarded()


@pytest.mark.parametrize("match", ["all", "any"])
def test_a_where_with_the_most_conditions_runs_on_both_backends(
    shared_store: AtomicStore, match: str
) -> None:
    table = fresh_table()
    shared_store.put(table, "k", {"n": 1, "s": "text", "l": [1, 2]})
    shared_store.put(table, "decoy", {"n": 2})
    kinds = [
        {"field": "n", "operator": "equals", "value": 1},
        {"field": "s", "operator": "contains", "value": "ex"},
        {"field": "l", "operator": "contains", "value": 2},
        {"field": "n", "operator": "in", "value": [1, "1"]},
        {"field": "s", "operator": "ends_with", "value": "xt"},
    ]
    where = (kinds * MAX_CONDITIONS)[:MAX_CONDITIONS]
    assert [row["key"] for row in shared_store.query(table, where=where, match=match)] == ["k"]
    claimed = shared_store.atomic_claim(table, where=where, match=match, limit=1000)
    assert [row["key"] for row in claimed["claimed"]] == ["k"]


def test_a_claimable_set_on_a_hostile_field_name_serves_claims_on_that_field(
    store: AtomicStore,
) -> None:
    for name in ["st%tus", "%s", "%%", "it's", 'say "hi"', "back\\slash", "?", "$1"]:
        where = [{"field": name, "operator": "equals", "value": "pending"}]
        index = store.ensure_claim_index(table="q", where=where, order_by="recordTimestamp")
        plan = store.explain_claim("q", where=where, order_by="recordTimestamp", generic=True)
        # The set's index holds just the matching rows, in claim order: no sort step is left.
        # (PostgreSQL still shows the predicate as a Filter: FOR UPDATE rechecks it.)
        assert index in plan, (name, plan)
        assert not any(step in plan for step in ("Sort", "TEMP B-TREE")), (name, plan)
