"""What one claim costs in the code and on the wire (issue 41).

A keyed claim, from ``AtomicStore.atomic_claim`` to the driver's statement,
passes through a handful of package modules (CONTRIBUTING.md lists them in
order): counted here with a profiler hook, as the issue counted the old path's
19. And a claim that finds nothing is one statement on PostgreSQL: the statement
finds its table's id itself, so no second round trip checks a held one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg
import pytest

from airflow_atomic_store import AtomicStore
from tests.support.specs import PENDING

PACKAGE = Path(__import__("airflow_atomic_store").__file__).resolve().parent
#: Issue 41's bound for a keyed claim from ``AtomicStore.atomic_claim`` (``spec/`` is one).
MAX_STORE_MODULES = 8


def module_of(filename: str) -> str | None:
    """The package module a code object belongs to, ``spec/`` counted as one; None outside."""
    path = Path(filename)
    if not path.is_absolute() or PACKAGE not in path.parents:
        return None
    relative = path.relative_to(PACKAGE).with_suffix("")
    if relative.parts[0] == "spec":
        return "spec"
    return ".".join(relative.parts)


@contextmanager
def traced_modules() -> Iterator[list[str]]:
    """The package modules whose functions run in the block, in the order first seen.

    Counted by the file a function is defined in (``co_filename``), the way a reader
    follows the call; code generated at run time (a dataclass's ``__init__``) is in
    no file of the package.
    """
    seen: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            module = module_of(frame.f_code.co_filename)
            if module is not None and module not in seen:
                seen.append(module)

    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)


def _keyed_claim(store: AtomicStore, number: int) -> dict[str, Any]:
    return store.atomic_claim(
        "jobs", where=PENDING, limit=1, execution_id="dag/run", idempotency_key=f"claim-{number}"
    )


def test_a_keyed_claim_passes_through_at_most_eight_package_modules(store: AtomicStore) -> None:
    for number in range(4):
        store.put("jobs", f"j{number}", {"status": "pending"})
    for number in range(2):  # steady state: connection open, sets listed, statement cached
        assert _keyed_claim(store, number)["count"] == 1
    with traced_modules() as modules:
        assert _keyed_claim(store, 2)["count"] == 1
    assert len(modules) <= MAX_STORE_MODULES, modules
    assert modules[0] == "store.atomic_store"
    assert "store.contract" not in modules  # no call back into the contract
    print(" > ".join(modules))


@contextmanager
def counted_statements(store: AtomicStore) -> Iterator[list[bytes]]:
    """The statements the store sends on its own connection in the block."""
    sent: list[bytes] = []
    original: Callable[..., Any] = psycopg.Cursor.execute

    def execute(cursor: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(query if isinstance(query, bytes) else str(query).encode())
        return original(cursor, query, *args, **kwargs)

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        psycopg.Cursor.execute = original  # type: ignore[method-assign]


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
def test_a_claim_that_finds_nothing_is_one_statement_on_postgres(
    store: AtomicStore, keyed: bool
) -> None:
    store.put("jobs", "j0", {"status": "done"})
    store.put("other", "o0", {"status": "pending"})
    for number in range(3):  # warm: connection, schema, sets listed, receipts purged
        assert _keyed_claim(store, number)["count"] == 0
        assert store.atomic_claim("jobs", where=PENDING)["count"] == 0
    for table in ("jobs", "never-written"):
        with counted_statements(store) as sent:
            if keyed:
                result = store.atomic_claim("jobs", where=PENDING, idempotency_key=f"k-{table}")
            else:
                result = store.atomic_claim(table, where=PENDING)
        assert result["count"] == 0
        assert len(sent) == 1, sent
    with counted_statements(store) as sent:
        assert store.atomic_claim("other", where=PENDING)["count"] == 1
    assert len(sent) == 1, sent  # one that finds rows costs the same
