"""Hostile text is data, on both live backends: field names and 100 KB strings.

Fills the gaps left by tests/integration/test_hostile_input.py (hostile keys, table
names and filter values): hostile *field names* through every primitive and in a
claimable set's index, 100 KB values, field names and filters, keys and table names
at and over their size limits, each on a live store whose other tables must be left
exactly as they were. Bad input (typed errors) is in test_hostile_and_bad_input.py.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore, SpecError
from airflow_atomic_store.spec import apply, parse_mutations
from airflow_atomic_store.spec.options import MAX_KEY_BYTES, MAX_TABLE_BYTES
from tests.support.sentinel import fresh_table, sentinel_check

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


@pytest.fixture
def guarded(shared_store: AtomicStore) -> Callable[[], None]:
    """A check that the sentinel table (tests/support/sentinel.py) is unchanged."""
    return sentinel_check(shared_store)


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
