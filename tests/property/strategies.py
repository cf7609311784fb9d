"""Random JSON values and specs for checking the backends against the oracle.

Floats stay below 1e12 in magnitude: PostgreSQL stores JSON numbers as
decimals, and beyond 2**53 a float's shortest decimal form is no longer its
binary value, so the two worlds may legitimately round differently there.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from airflow_atomic_store.spec import MISSING, OPERATORS, parse_path, resolve
from airflow_atomic_store.spec.values import INT_MAX, INT_MIN

# A small key pool makes random paths hit real fields often; it includes the
# characters that need quoting in SQL and JSON paths.
KEYS = ["a", "b", "status", "é", 'q"t', "back\\slash", "it's", "$1", "%s", "0", "sp ace", "😀"]

keys = st.sampled_from(KEYS)
floats = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)
integers = st.integers(-1000, 1000) | st.sampled_from([INT_MIN, INT_MAX, 2**53, -(2**53) - 1])
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
    | st.sampled_from(["", "a", "ab", "pending", "in_flight", "%s", "'", "é"])
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


def _value_for(operator: str, actual: Any) -> st.SearchStrategy[Any]:
    """Condition values valid for ``operator``, often equal to the stored one."""
    near = [actual] if actual is not MISSING else []
    if operator in ("in", "not_in"):
        return st.lists(json_values | st.sampled_from(near or [None]), max_size=3)
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
