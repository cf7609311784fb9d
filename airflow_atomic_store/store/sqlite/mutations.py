"""Top-level ``set`` mutations as one ``json_set`` expression, so a claim is one statement.

The SQLite backend applies mutations through the reference ``apply`` in
Python, which costs a read, a deep copy, a JSON round trip and a write per
row. The mutations almost every claim and "mark done" update carries (``set``
of a top-level field with a plain name) have one meaning that ``json_set``
computes exactly: a row value is always an object, so such a ``set`` cannot
fail, it replaces the member in place or appends it, left to right, as
``apply`` does. SQLite (3.40 here) keeps the text of every number and string
it does not touch when it writes the document back, so the stored JSON is the
text ``apply`` and ``dumps`` would have stored (``tests/integration/
test_sqlite_json_set.py``). Anything else keeps the Python path.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from airflow_atomic_store.spec import Mutation
from airflow_atomic_store.spec.values import dumps
from airflow_atomic_store.store.sqlite.where import json_path, literal

_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def plain_fields(mutations: Sequence[Mutation]) -> tuple[str, ...] | None:
    """The fields set, in order, when every mutation sets a top-level plain-named field.

    Decided once per shape (operations and paths): a claim's default mutations
    differ in their values only.
    """
    return _plain_fields(tuple((m.operation, m.path.segments) for m in mutations))


@lru_cache(maxsize=1024)
def _plain_fields(shape: tuple[tuple[str, tuple[Any, ...]], ...]) -> tuple[str, ...] | None:
    fields = []
    for operation, segments in shape:
        if operation != "set" or len(segments) != 1:
            return None
        (name,) = segments
        if not isinstance(name, str) or not _PLAIN_NAME.fullmatch(name):
            return None
        fields.append(name)
    return tuple(fields) if fields else None


@lru_cache(maxsize=256)
def json_set_sql(fields: tuple[str, ...]) -> str:
    """``json_set(value, '$.f1', json(?), …)``: each value bound as its JSON text.

    ``json(?)`` makes SQLite insert the bound text as JSON (object, array,
    number, …) rather than as a string; the paths go through ``literal()``.
    """
    pairs = ", ".join(f"{literal(json_path((name,)))}, json(?)" for name in fields)
    return f"json_set(value, {pairs})"


def json_set_params(mutations: Sequence[Mutation]) -> list[str]:
    return [dumps(mutation.value) for mutation in mutations]
