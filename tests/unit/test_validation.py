"""Every invalid spec is a SpecError that names the field, raised before any I/O."""

from __future__ import annotations

import pytest

import airflow_atomic_store
from airflow_atomic_store import AtomicStore, SpecError

# Nothing listens on port 1: any attempt to connect would fail with a
# different error, so a SpecError proves validation ran before any I/O.
UNREACHABLE = "postgresql://nobody@127.0.0.1:1/none"


@pytest.fixture
def store():
    with AtomicStore(UNREACHABLE) as store:
        yield store


def cond(field="n", operator="equals", value=1):
    return {"field": field, "operator": operator, "value": value}


def mut(field="n", operation="set", value=1):
    return {"field": field, "operation": operation, "value": value}


UPDATE_CASES = [
    ({"where": "status = 1"}, "where", "list of conditions"),
    ({"where": [1]}, "where[0]", "must be an object"),
    (
        {"where": [{"field": "n", "operator": "equals", "value": 1, "oops": 1}]},
        "where[0]",
        "unknown keys",
    ),
    ({"where": [{"operator": "equals", "value": 1}]}, "where[0]", "needs a 'field'"),
    ({"where": [cond(field="a..b")]}, "where[0].field", "invalid field path"),
    ({"where": [{"field": "n", "value": 1}]}, "where[0].operator", "needs an 'operator'"),
    ({"where": [cond(operator="like")]}, "where[0].operator", "valid: equals"),
    ({"where": [{"field": "n", "operator": "equals"}]}, "where[0].value", "needs a 'value'"),
    ({"where": [cond(operator="in", value=1)]}, "where[0].value", "needs a list"),
    ({"where": [cond(operator="gt", value=True)]}, "where[0].value", "number or a string"),
    ({"where": [cond(operator="gt", value=None)]}, "where[0].value", "number or a string"),
    ({"where": [cond(operator="starts_with", value=1)]}, "where[0].value", "needs a string"),
    ({"where": [cond(value=float("nan"))]}, "where[0].value", "finite"),
    ({"where": [cond(value=2**64)]}, "where[0].value", "64-bit"),
    ({"where": [cond(value={"a": "\x00"})]}, "where[0].value.a", "NUL"),
    ({"where": [cond(value=object())]}, "where[0].value", "not a JSON value"),
    ({"match": "some"}, "match", "'all' or 'any'"),
    ({"mutations": []}, "mutations", "at least one"),
    ({"mutations": "n=1"}, "mutations", "list of mutations"),
    ({"mutations": [mut(operation="append")]}, "mutations[0].operation", "valid: set, increment"),
    (
        {"mutations": [mut(operation="increment", value=True)]},
        "mutations[0].value",
        "needs a number",
    ),
    (
        {"mutations": [mut(operation="increment", value="1")]},
        "mutations[0].value",
        "needs a number",
    ),
    ({"mutations": [mut(value=float("inf"))]}, "mutations[0].value", "finite"),
    ({"mutations": [{"field": "n", "operation": "set"}]}, "mutations[0].value", "needs a 'value'"),
    ({"mutations": [mut(field="a[")]}, "mutations[0].field", "invalid field path"),
    ({"return_fields": [""]}, "return_fields", "non-empty"),
]


@pytest.mark.parametrize(("kwargs", "field", "problem"), UPDATE_CASES)
def test_invalid_update_specs_name_the_field_before_any_io(store, kwargs, field, problem):
    arguments = {"mutations": [mut()], **kwargs}
    with pytest.raises(SpecError, match=problem) as info:
        store.atomic_update("t", "k", **arguments)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("kwargs", "field", "problem"),
    [
        ({"limit": 0}, "limit", "from 1 to 1000"),
        ({"limit": -1}, "limit", "from 1 to 1000"),
        ({"limit": 1001}, "limit", "from 1 to 1000"),
        ({"limit": 2.5}, "limit", "integer"),
        ({"limit": "10"}, "limit", "integer"),
        ({"limit": True}, "limit", "integer"),
        ({"order_by": "priority"}, "order_by", "createdAt, recordTimestamp"),
        ({"direction": "up"}, "direction", "'asc' or 'desc'"),
        ({"mutations": []}, "mutations", "at least one"),
        ({"execution_id": ""}, "execution_id", "non-empty"),
    ],
)
def test_invalid_claim_specs_name_the_field_before_any_io(store, kwargs, field, problem):
    with pytest.raises(SpecError, match=problem) as info:
        store.atomic_claim("t", **kwargs)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.atomic_upsert("t", "k", insert_value=[1]), "insert_value"),
        (lambda s: s.atomic_upsert("t", "k", insert_value={"n": float("nan")}), "insert_value.n"),
        (lambda s: s.put("t", "k", "not an object"), "value"),
        (lambda s: s.put("", "k", {}), "table"),
        (lambda s: s.put("t\x00", "k", {}), "table"),
        (lambda s: s.get("t", ""), "key"),
        (lambda s: s.get("t", None), "key"),
        (lambda s: s.delete("t", "a\x00b"), "key"),
        (lambda s: s.query("t", limit=0), "limit"),
    ],
)
def test_invalid_plain_verb_arguments_are_spec_errors(store, call, field):
    with pytest.raises(SpecError) as info:
        call(store)
    assert info.value.field == field


def test_unsupported_url_scheme_is_a_spec_error_that_hides_the_password():
    with pytest.raises(SpecError) as info:
        AtomicStore("mysql://me:secret@db/x")
    assert "secret" not in str(info.value)
    assert info.value.field == "url"


def test_storage_table_must_be_a_plain_identifier():
    with pytest.raises(SpecError) as info:
        AtomicStore("sqlite:////tmp/x.db", storage_table='rows"; DROP TABLE x; --')
    assert info.value.field == "storage_table"


@pytest.mark.parametrize(
    "name",
    [
        "jobs_tables",
        "jobs_claim_sets",
        "jobs_receipts",
        "jobs_pkey",
        "jobs_created_idx",
        "jobs_set_0123456789",
    ],
)
def test_storage_table_may_not_take_a_name_the_store_gives_another_tables_companions(name):
    """Store ``jobs`` keeps its catalog in ``jobs_tables``: a store named that could not work."""
    with pytest.raises(SpecError, match="must not end like the store's own") as info:
        AtomicStore("sqlite:////tmp/x.db", storage_table=name)
    assert info.value.field == "storage_table"


@pytest.mark.parametrize("name", ["jobs", "hot_rows", "tables", "jobs_set", "my_idx_rows"])
def test_storage_table_names_that_only_contain_a_reserved_word_are_accepted(name):
    AtomicStore("sqlite:////tmp/x.db", storage_table=name).close()


def test_the_public_api_is_pinned():
    assert sorted(airflow_atomic_store.__all__) == [
        "AccessDeniedError",
        "AtomicClaimOperator",
        "AtomicStore",
        "AtomicStoreError",
        "AtomicStoreHook",
        "AtomicUpdateManyOperator",
        "AtomicUpdateOperator",
        "AtomicUpsertManyOperator",
        "AtomicUpsertOperator",
        "ConnectionConfigError",
        "DuplicateMemberError",
        "IdempotencyKeyError",
        "MutationError",
        "ResultTooLargeError",
        "SpecError",
        "StoreLocationError",
        "StoreUnavailableError",
    ]


def test_spec_and_mutation_errors_share_the_one_root():
    from airflow_atomic_store import AtomicStoreError, MutationError

    assert issubclass(SpecError, AtomicStoreError)
    assert issubclass(MutationError, AtomicStoreError)


def test_an_integer_key_is_its_decimal_text_but_an_integer_table_name_is_refused(tmp_path):
    """A shard or event number reaching the store as an int (a mapped value, the Python API)
    is a key; a table is named in the DAG, and ``archive_table=5`` was a slip (issue 39)."""
    with AtomicStore(f"sqlite:///{tmp_path / 'store.db'}") as local:
        local.put("7", 42, {"n": 1})
        assert local.get("7", "42") == {"n": 1}
        assert local.atomic_upsert("7", 42, insert_value={"n": 2})["inserted"] is False
        with pytest.raises(SpecError, match="table: must be a string, got int"):
            local.put(7, 42, {"n": 1})
        assert local.query("7") == [{"key": "42", "value": {"n": 1}}]


@pytest.mark.parametrize("table", [True, 1.5, 2**64, 7, None, ["t"]])
def test_a_table_name_that_is_not_text_is_a_spec_error(store, table):
    with pytest.raises(SpecError) as info:
        store.get(table, "k")
    assert info.value.field == "table"
