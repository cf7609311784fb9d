"""JSON text from people (a command line, a page's form, a serialized trigger): parsed strictly.

One loader for every place that reads such text, so all of them refuse the same
things: ``json.loads`` takes an object's duplicated member last-wins, which
silently drops the condition the author saw first.
"""

from __future__ import annotations

import json
import re
from typing import Any

from airflow_atomic_store.exceptions import DuplicateMemberError


class _Duplicate(Exception):
    def __init__(self, member: str) -> None:
        self.member = member


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members: dict[str, Any] = {}
    for name, value in pairs:
        if name in members:
            raise _Duplicate(name)
        members[name] = value
    return members


def loads(text: str | bytes, field: str = "json") -> Any:
    """``json.loads`` that refuses an object naming a member twice.

    :raises DuplicateMemberError: naming the member (a ``SpecError`` about ``field``
        and a ``json.JSONDecodeError``); other bad text raises ``json.JSONDecodeError``.
    """
    try:
        return json.loads(text, object_pairs_hook=_unique_members)
    except _Duplicate as duplicate:
        source = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        raise DuplicateMemberError(
            field, duplicate.member, source, _second_occurrence(source, duplicate.member)
        ) from None


def _second_occurrence(text: str, member: str) -> int:
    """Where the member is named the second time, as written plainly; else 0 (escaped)."""
    named = re.compile(re.escape(json.dumps(member, ensure_ascii=False)) + r"\s*:")
    found = [match.start() for match in named.finditer(text)]
    return found[1] if len(found) > 1 else 0
