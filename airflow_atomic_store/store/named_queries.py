"""Named static statements: the ``-- name: x`` sections of a backend's ``queries.sql``.

As procrastinate keeps its ``queries.sql``: a statement that never changes at
run time is data, read once; each backend fills in only its identifiers (the
store's tables), with its driver's quoting.
"""

from __future__ import annotations

import re
from importlib import resources

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def named_queries(package: str, file_name: str = "queries.sql") -> dict[str, str]:
    """``{name: statement}`` from a package's ``.sql`` file; comment lines are dropped."""
    return named_sections(resources.files(package).joinpath(file_name).read_text(encoding="utf-8"))


def named_sections(text: str) -> dict[str, str]:
    """``{name: statement}`` from ``.sql`` text (a SQLite migration's statements)."""
    sections = _NAME.split(text)[1:]
    queries: dict[str, str] = {}
    for name, body in zip(sections[::2], sections[1::2], strict=True):
        lines = [line.strip() for line in body.splitlines()]
        queries[name] = " ".join(line for line in lines if line and not line.startswith("--"))
    return queries
