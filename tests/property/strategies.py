"""Random JSON values and specs for checking the backends against the oracle.

Numbers reach every magnitude, and integers beyond 2**53 come next to floats of
nearly the same value (a float there is a multiple of a power of two, its
shortest decimal is not its value): the backends must compare them exactly, as
Python does, and store an increment's float as ``apply`` computes it.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from airflow_atomic_store.spec import ALIASES, MISSING, OPERATORS, parse_path, resolve
from airflow_atomic_store.spec.claim_sets import DECLARABLE_OPERATORS
from airflow_atomic_store.spec.values import INT_MAX, INT_MIN

# A small key pool makes random paths hit real fields often; it includes the
# characters that need quoting in SQL and JSON paths.
KEYS = ["a", "b", "status", "é", 'q"t', "back\\slash", "it's", "$1", "%s", "0", "sp ace", "😀"]

keys = st.sampled_from(KEYS)
#: Integers where a float cannot hold every one (2^53..2^63), and their float neighbours.
large_integers = st.integers(2**53, INT_MAX) | st.integers(INT_MIN, -(2**53))
floats = (
    st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)
    | st.floats(allow_nan=False, allow_infinity=False)
    | large_integers.map(float)
)
integers = (
    st.integers(-1000, 1000)
    | st.sampled_from([INT_MIN, INT_MAX, 2**53, -(2**53) - 1, 2**53 + 1])
    | large_integers
    | floats.filter(lambda f: abs(f) < 2**63).map(int)
)
timestamps = st.sampled_from(
    [
        "2026-01-01T00:00:00.000000Z",
        "2026-01-01T00:00:00.000001Z",
        "2026-06-15T12:30:00.500000Z",
        "2027-01-01T00:00:00.000000Z",
    ]
)
texts = (
    st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
        max_size=6,
    )
    | st.sampled_from(["", "a", "ab", "pending", "in_flight", "%s", "'", "é", "[a", "{b}", "[1]"])
    | timestamps
)
scalars = st.none() | st.booleans() | integers | floats | texts
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(keys, children, max_size=3),
    max_leaves=8,
)
documents = st.dictionaries(keys, json_values, max_size=5)


@st.composite
def paths(draw: st.DrawFn, document: dict[str, Any] | None = None) -> str:
    """A path that often walks the document's real structure, sometimes not."""
    current: Any = document
    text = (
        draw(keys)
        if not document or draw(st.booleans())
        else draw(st.sampled_from(sorted(document)))
    )
    current = document.get(text, MISSING) if document else MISSING
    for _ in range(draw(st.integers(0, 2))):
        if isinstance(current, list) and current and draw(st.booleans()):
            index = draw(st.integers(0, len(current)))
            text += f"[{index}]"
            current = current[index] if index < len(current) else MISSING
        elif isinstance(current, dict) and current and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(current)))
            text += f".{key}"
            current = current[key]
        elif draw(st.booleans()):
            text += f".{draw(keys)}"
            current = MISSING
        else:
            break
    return text


def numeric_neighbours(actual: Any) -> list[Any]:
    """Numbers of the other kind next to a stored number: equal, just above, just below."""
    if isinstance(actual, bool) or not isinstance(actual, (int, float)):
        return []
    if isinstance(actual, int):
        return [float(actual)]
    if abs(actual) >= 2**63:
        return []
    exact = int(actual)
    return [n for n in (exact - 1, exact, exact + 1) if INT_MIN <= n <= INT_MAX]


def _value_for(operator: str, actual: Any) -> st.SearchStrategy[Any]:
    """Condition values valid for ``operator``, often equal to the stored one."""
    near = [actual] if actual is not MISSING else []
    if operator in ("in", "not_in"):
        return st.lists(json_values | st.sampled_from(near or [None]), max_size=3)
    near += numeric_neighbours(actual)
    if operator in ("gt", "gte", "lt", "lte"):
        orderable = [
            v for v in near if isinstance(v, (int, float, str)) and not isinstance(v, bool)
        ]
        return integers | floats | texts | st.sampled_from(orderable or [0])
    if operator in ("starts_with", "ends_with"):
        text = [actual[:2], actual[-2:]] if isinstance(actual, str) else [""]
        return texts | st.sampled_from(text)
    if operator in ("contains", "not_contains"):
        inner = list(actual) if isinstance(actual, list) else []
        inner += [actual[1:3]] if isinstance(actual, str) else []
        return json_values | st.sampled_from(inner or [None])
    return json_values | st.sampled_from(near or [None])


@st.composite
def conditions(draw: st.DrawFn, document: dict[str, Any] | None = None) -> dict[str, Any]:
    path = draw(paths(document))
    operator = draw(st.sampled_from(sorted(OPERATORS)))
    condition: dict[str, Any] = {"field": path, "operator": operator}
    if OPERATORS[operator].takes_value:
        actual = resolve(document or {}, parse_path(path, field="path"))
        condition["value"] = draw(_value_for(operator, actual))
    return condition


@st.composite
def wheres(draw: st.DrawFn, document: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return draw(st.lists(conditions(document), max_size=3))


@st.composite
def mutation_lists(draw: st.DrawFn, document: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    items = []
    for _ in range(draw(st.integers(1, 3))):
        path = draw(paths(document))
        if draw(st.booleans()):
            items.append({"field": path, "operation": "set", "value": draw(json_values)})
        else:
            delta = draw(st.integers(-5, 5) | floats | st.sampled_from([1, -1, 0.5]))
            items.append({"field": path, "operation": "increment", "value": delta})
    return items


# -- raw input, valid or not: for fuzzing the validator ---------------------------------------
#
# Every strategy below draws the valid form most of the time and otherwise something
# malformed: a wrong type, an unknown name, a bad path, a value that is not storable
# JSON. A store given any of it must raise SpecError before I/O or return the
# oracle's result; nothing may reach the database and fail there.


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


_cyclic: dict[str, Any] = {}
_cyclic["self"] = _cyclic

#: Python values that are not storable JSON, alone or nested.
bad_values = st.sampled_from(
    [
        float("nan"),
        float("inf"),
        float("-inf"),
        2**64,
        -(2**63) - 1,
        b"bytes",
        object(),
        {1: "non-string key"},
        {"a\x00": 1},
        "nul\x00",
        "\ud800",
        {"a": [1, float("nan")]},
        {1, 2},
        _nested(150),
        _cyclic,
    ]
)
#: Finite floats of any magnitude, and numbers at the edges of what is storable.
edge_numbers = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [1e16, 1e20, -1e300, 1.7976931348623157e308, 5e-324, -0.0, 0.1, INT_MAX, INT_MIN, 2**53 + 1]
)
#: Path segments of arbitrary Unicode (no dot, bracket or control character).
segment_texts = st.text(
    st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters=".[]"),
    min_size=1,
    max_size=6,
)
bad_paths = st.sampled_from(
    [
        "",
        ".",
        "a.",
        ".a",
        "a..b",
        "a[",
        "a]",
        "a[]",
        "a[-1]",
        "a[01]",
        "a[x]",
        "[0]",
        "a[0]b",
        "a\x00b",
        "a\tb",
        "a\x7f",
        "a\x9f",
        "\ud800",
        ".".join(["a"] * 33),
        "a[2147483648]",
        "a[99999999999999999999]",
    ]
) | st.sampled_from([None, 0, 1.5, True, ["a"], {"a": 1}, b"a"])
junk = st.sampled_from(["status = 'pending'", 5, None, True, ["field"], b"x", 1.5])


@st.composite
def raw_paths(draw: st.DrawFn, document: dict[str, Any] | None = None) -> Any:
    choice = draw(st.integers(0, 9))
    if choice < 6:
        return draw(paths(document))
    if choice < 8:
        text = draw(segment_texts)
        for _ in range(draw(st.integers(0, 2))):
            text += (
                f"[{draw(st.integers(0, 3))}]" if draw(st.booleans()) else "." + draw(segment_texts)
            )
        return text
    return draw(bad_paths)


#: Anything a caller might pass as a value: JSON, edge numbers, or not storable at all.
raw_values = json_values | edge_numbers | bad_values

raw_operator_names = st.sampled_from(sorted(OPERATORS) + sorted(ALIASES)) | st.sampled_from(
    ["like", "EQUALS", "", "= 1 OR 1=1", "eq ", None, 1, ["equals"]]
)


@st.composite
def raw_conditions(draw: st.DrawFn, document: dict[str, Any] | None = None) -> Any:
    choice = draw(st.integers(0, 9))
    if choice < 5:
        return draw(conditions(document))
    if choice == 5:
        return draw(junk)
    item: dict[Any, Any] = {}
    if draw(st.integers(0, 9)):
        item["field"] = draw(raw_paths(document))
    name_key = draw(st.sampled_from(["operator", "operator", "op", None]))
    if name_key is not None:
        item[name_key] = draw(raw_operator_names)
    if draw(st.integers(0, 3)):
        item["value"] = draw(raw_values)
    if not draw(st.integers(0, 9)):
        item[draw(st.sampled_from(["extra", "Field", 1]))] = 1
    return item


def raw_wheres(document: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
    return (
        st.none()
        | st.lists(raw_conditions(document), max_size=4)
        | st.lists(raw_conditions(document), max_size=3).map(tuple)
        | raw_conditions(document)
        | junk
    )


raw_operation_names = st.sampled_from(["set", "increment"]) | st.sampled_from(
    ["append", "SET", "", None, 1, "increment; drop"]
)


@st.composite
def raw_mutations(draw: st.DrawFn, document: dict[str, Any] | None = None) -> Any:
    choice = draw(st.integers(0, 9))
    if choice < 4:
        return draw(mutation_lists(document))[0]
    if choice == 4:
        return draw(junk)
    item: dict[Any, Any] = {}
    if draw(st.integers(0, 9)):
        item["field"] = draw(raw_paths(document))
    name_key = draw(st.sampled_from(["operation", "operation", "op", None]))
    if name_key is not None:
        item[name_key] = draw(raw_operation_names)
    if draw(st.integers(0, 5)):
        item["value"] = draw(raw_values | st.sampled_from([True, False, "1", None, [1], {"n": 1}]))
    if not draw(st.integers(0, 9)):
        item["extra"] = 1
    return item


def raw_mutation_lists(document: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
    return (
        mutation_lists(document)
        | st.lists(raw_mutations(document), max_size=3)
        | raw_mutations(document)
        | st.none()
    )


raw_matches = st.sampled_from(["all", "any"]) | st.sampled_from(
    ["ALL", "Any", "most", "", None, 1, ["all"], "all OR 1=1"]
)
raw_limits = st.integers(-2, 1002) | st.sampled_from(
    [0, 1, 1000, 1001, 10_000, 10_001, 1.0, 2.5, "10", None, True, False, float("nan"), 10**30]
)
raw_order_bys = st.sampled_from(["createdAt", "recordTimestamp"]) | st.sampled_from(
    [
        "created_at",
        "record_timestamp",
        "createdat",
        "key",
        "value",
        "priority",
        None,
        1,
        ["createdAt"],
        "created_at DESC",
        "created_at; DROP TABLE x",
    ]
)
raw_directions = st.sampled_from(["asc", "desc"]) | st.sampled_from(
    ["ASC", "Desc", "up", "", None, 1, "asc, key"]
)
raw_return_fields = (
    st.none()
    | st.lists(keys | segment_texts, max_size=3)
    | st.sampled_from(["status", 5, [""], ["a\x00"], [1], ("a",), {"a": 1}, "a.b", "\ud800"])
)
raw_execution_ids = (
    st.none()
    | texts
    | st.sampled_from(["", 1, "run\x00", "\ud800", ["id"], "x" * 2000, "it's", "%s"])
)
raw_tables = st.sampled_from(["", None, 1, "t\x00", "\ud800", "x" * 513, ["t"], b"t"])
raw_keys = st.sampled_from(
    ["", None, True, 1.5, "k\x00", "\udfff", "k" * 1025, 10**30, ["k"], b"k"]
) | st.sampled_from([0, -1, 2**63 - 1, "'; --", "%s", "?", "$1", "é" * 512])

#: Valid documents and mutations whose numbers reach the edges (huge, tiny, int64).
edge_documents = st.dictionaries(keys, json_values | edge_numbers, max_size=5)


@st.composite
def edge_mutation_lists(
    draw: st.DrawFn, document: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    items = []
    for _ in range(draw(st.integers(1, 3))):
        path = draw(paths(document))
        if draw(st.booleans()):
            items.append({"field": path, "operation": "set", "value": draw(edge_numbers)})
        else:
            items.append({"field": path, "operation": "increment", "value": draw(edge_numbers)})
    return items


execution_ids = st.none() | st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=8
)


#: Plain top-level names: SQLite runs a list of sets on these as one json_set.
plain_names = st.sampled_from(["a", "b", "status", "claimedBy", "_x9"])
top_level_sets = st.lists(
    st.fixed_dictionaries(
        {"field": plain_names, "operation": st.just("set"), "value": json_values}
    ),
    min_size=1,
    max_size=4,
)


#: What a claimable set may compare with: scalars but floats (``spec/claim_sets.py``).
set_literals = st.none() | st.booleans() | integers | texts


@st.composite
def set_conditions(draw: st.DrawFn) -> dict[str, Any]:
    """A condition a claimable set can be declared with, on a top-level field."""
    operator = draw(st.sampled_from(sorted(DECLARABLE_OPERATORS)))
    condition: dict[str, Any] = {"field": draw(keys), "operator": operator}
    if operator in ("in", "not_in"):
        condition["value"] = draw(st.lists(set_literals, min_size=1, max_size=3))
    elif OPERATORS[operator].takes_value:
        condition["value"] = draw(set_literals)
    return condition


#: Any storable number: small, huge, and integers beyond 2^53 beside their float neighbours.
numbers = integers | floats


@st.composite
def number_pairs(draw: st.DrawFn) -> tuple[Any, Any]:
    """A stored number and a condition value: often its neighbour of the other kind."""
    stored = draw(numbers)
    neighbours = numeric_neighbours(stored)
    value = draw(st.sampled_from(neighbours) | numbers if neighbours else numbers)
    return stored, value
