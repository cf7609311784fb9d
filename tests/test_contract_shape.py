"""The shape of the backend contract and of the SQL the package writes (issue 32).

A backend method takes one request object or at most three plain values, so a new
option is a field of a request, not a parameter in every backend's signature; and
no SQL text is edited (``.replace``, ``.split``, ``.rsplit``, ``%``) after it is
written: statements are named queries or composed with the driver's own tools.
Both are read from the code, not from a run, so a path no test reaches still counts.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from airflow_atomic_store.store.backend import Backend
from airflow_atomic_store.store.claim_set_types import SetStorage
from airflow_atomic_store.store.notify import Listener, Notifications, Reader
from airflow_atomic_store.store.snapshot import Snapshot

ROOT = Path(__file__).resolve().parents[1]
#: Every statement the package writes is built under ``store/`` (no SQL elsewhere).
SQL_PACKAGE = ROOT / "airflow_atomic_store" / "store"
MAX_PLAIN_ARGUMENTS = 3
#: What a backend implements, and what its methods hand back (``Backend.snapshot``).
PROTOCOLS = (Backend, SetStorage, Notifications, Listener, Reader, Snapshot)

#: Text edits under ``store/`` that are not applied to SQL: ``(module, receiver, method)``
#: as written in the source, and why each is allowed.
NOT_SQL = {
    ("opening.py", 'url.split("://", 1)[0]', "split"): "the store URL's scheme",
    ("opening.py", "url", "split"): "the store URL's scheme",
    ("urls.py", "url", "split"): "a store URL's scheme and the rest",
    ("urls.py", "message", "replace"): "a driver's error message, its password hidden",
    ("sqlite/backend.py", "url", "split"): "the SQLite URL's file path",
    ("named_queries.py", "_NAME", "split"): (
        "reading a .sql data file into its named statements, before any statement exists"
    ),
    ("named_queries.py", "body", "splitlines"): "the same: one named section's lines",
    ("postgres/where.py", "sql.Literal(value).as_string(None)", "replace"): (
        "escaping at write time: a quoted literal's % doubled, psycopg's documented rule "
        "for text that goes through its placeholder parser"
    ),
    ("postgres/where.py", 'segment.replace("\\\\", "\\\\\\\\")', "replace"): (
        "a JSON path segment (a value) escaped before psycopg quotes the path as a literal"
    ),
    ("postgres/where.py", "segment", "replace"): "the same segment's first escape",
}
EDITS = {"replace", "split", "rsplit", "splitlines"}


def _methods(protocol: type) -> list[tuple[str, inspect.Signature]]:
    """The protocol's own and inherited methods, as declared (not as implemented)."""
    found = []
    for name, member in inspect.getmembers(protocol, inspect.isfunction):
        if not name.startswith("_"):
            found.append((name, inspect.signature(member)))
    return found


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_each_backend_method_takes_a_request_or_at_most_three_plain_arguments(
    protocol: type,
) -> None:
    too_many = []
    for name, signature in _methods(protocol):
        parameters = [p for p in signature.parameters.values() if p.name != "self"]
        variadic = [p for p in parameters if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if len(parameters) > MAX_PLAIN_ARGUMENTS or variadic:
            too_many.append(f"{protocol.__name__}.{name}{signature}")
    assert too_many == [], "take one request object (a frozen dataclass) instead"


def test_the_audit_sees_every_method_of_the_backend_contract() -> None:
    """The walk above reaches inherited methods (a Backend is also a SetStorage)."""
    names = {name for name, _ in _methods(Backend)}
    assert {"claim", "update", "build_claim_set", "drop_idle_claim_sets"} <= names


def _edits(path: Path) -> list[tuple[str, str, int]]:
    """``(receiver, method, line)`` of each ``x.replace/split/rsplit/splitlines(...)``,
    and ``("%", "%", line)`` for each ``%`` applied to a string."""
    source = path.read_text()
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in EDITS
        ):
            receiver = ast.get_source_segment(source, node.func.value) or ""
            found.append((receiver, node.func.attr, node.lineno))
        elif (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Mod)
            and isinstance(node.left, (ast.Constant, ast.JoinedStr))
            and not isinstance(getattr(node.left, "value", ""), (int, float))
        ):
            found.append(("%", "%", node.lineno))
    return found


def test_no_sql_text_is_edited_after_it_is_written() -> None:
    unexplained = []
    allowed_seen = set()
    for path in sorted(SQL_PACKAGE.rglob("*.py")):
        module = path.relative_to(SQL_PACKAGE).as_posix()
        for receiver, method, line in _edits(path):
            entry = (module, receiver, method)
            if entry in NOT_SQL:
                allowed_seen.add(entry)
            else:
                unexplained.append(f"store/{module}:{line}: {receiver}.{method}(…)")
    assert unexplained == [], (
        "compose SQL (named queries, psycopg.sql) instead of editing its text; "
        "a use on something other than SQL goes in NOT_SQL with its reason"
    )
    assert set(NOT_SQL) - allowed_seen == set(), "NOT_SQL lists edits that are gone"
