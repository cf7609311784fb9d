"""JSON parameters for PostgreSQL ``jsonb`` that keep floats floats.

``jsonb`` stores a number as ``numeric`` and writes it back positionally with
the fractional digits it was given: ``2.0`` reads back as the float ``2.0``,
but ``1e+16`` (Python's text for the float 1e16) reads back as the integer
``10000000000000000``, which the increment function then adds as an integer
and the 64-bit range check rejects beyond 9.2e18. Writing every float
positionally with a fractional part keeps the distinction, so on PostgreSQL,
as on SQLite, a float stays a float and an integer an integer.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from psycopg.types.json import Jsonb

from airflow_atomic_store.spec.values import dumps as compact_dumps

#: A float Python writes in exponent form (``1e+16``, ``5e-324``): repr always signs it.
_EXPONENT = re.compile(r"[0-9]e[+-]")


def float_text(number: float) -> str:
    """The float's shortest decimal, positional and with a fraction: ``1e+16`` → ``…0.0``."""
    text = repr(number)
    if "e" in text:
        text = format(Decimal(text), "f")
    return text if "." in text else text + ".0"


def dumps(value: Any) -> str:
    """Compact JSON text of a validated value, every float written by :func:`float_text`."""
    text = compact_dumps(value)
    if not _EXPONENT.search(text):  # the common case: no float needs rewriting
        return text
    return _positional(value)


def _positional(value: Any) -> str:
    if isinstance(value, float):
        return float_text(value)
    if isinstance(value, dict):
        items = (f"{compact_dumps(key)}:{_positional(item)}" for key, item in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_positional(item) for item in value) + "]"
    return compact_dumps(value)


def jsonb(value: Any) -> Jsonb:
    return Jsonb(value, dumps=dumps)
