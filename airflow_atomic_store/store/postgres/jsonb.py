"""JSON parameters for PostgreSQL ``jsonb``: every float written as its exact value.

``jsonb`` stores a number as ``numeric`` and compares numbers by their decimal
value, where Python (the reference evaluator) compares a float by its binary
value: ``1733450000123456780 < 1.7334500001234568e18`` is false in Python, but
true against the float's shortest decimal ``1733450000123456800``. Written as
its exact decimal (every double has one), a float compares in ``jsonb`` as in
Python against integers and floats alike, in ``=``, ordering, ``IN`` and deep
equality, and still reads back as the same float. Written positionally with at
least one fractional digit, it also reads back as a float, never as an integer
(``1e16`` would): a float stays a float and an integer an integer, as on SQLite.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from psycopg.types.json import Jsonb

from airflow_atomic_store.spec.values import dumps as compact_dumps


def float_text(number: float) -> str:
    """The float's exact decimal, positional and with a fraction: ``0.5``, ``1e16`` → ``…0.0``.

    ``Decimal(float)`` is exact: ``0.1`` is ``0.1000000000000000055511151231257827…``
    (55 fractional digits), which ``json.loads`` reads back as ``0.1``.
    """
    text = format(Decimal(number), "f")
    return text if "." in text else text + ".0"


def exact_numeric(number: int | float) -> int | Decimal:
    """A number to bind as ``numeric``: integers as they are, floats by their exact value."""
    return number if isinstance(number, int) else Decimal(number)


def dumps(value: Any) -> str:
    """Compact JSON text of a validated value, every float written by :func:`float_text`."""
    return _exact(value) if _has_float(value) else compact_dumps(value)


def _has_float(value: Any) -> bool:
    kind = type(value)
    if kind is float:
        return True
    if kind is dict:
        return any(map(_has_float, value.values()))
    if kind is list:
        return any(map(_has_float, value))
    return False


def _exact(value: Any) -> str:
    if isinstance(value, float):
        return float_text(value)
    if isinstance(value, dict):
        items = (f"{compact_dumps(key)}:{_exact(item)}" for key, item in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_exact(item) for item in value) + "]"
    return compact_dumps(value)


def jsonb(value: Any) -> Jsonb:
    return Jsonb(value, dumps=dumps)
