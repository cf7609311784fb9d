"""Every command's arguments, declared once as data.

The same declarations build ``python -m airflow_atomic_store``'s own argparse
parser and, on Airflow 3.2+, the ``Arg`` objects of ``airflow atomic-store``
(``airflow_commands.py``), so the two forms cannot drift apart. Values that
argparse can check (JSON, durations, integers) are checked here and a bad one
exits with 2, argparse's usage error; the spec layer checks the rest.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from airflow_atomic_store.spec import json_text

#: The store URL is read from here when ``--url`` is not given: a password in an
#: environment variable stays out of the process list and the shell history.
URL_VARIABLE = "ATOMIC_STORE_URL"

_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
_SHORT = re.compile(r"(?:\d+(?:\.\d+)?[wdhms])+")
_SHORT_PART = re.compile(r"(\d+(?:\.\d+)?)([wdhms])")
_ISO = re.compile(
    r"P(?:(?P<w>\d+(?:\.\d+)?)W)?(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?"
)


def duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``2h``, ``1d``, ``1h30m`` or ISO 8601 (``PT15M``, ``P1DT2H``); positive."""
    cleaned = text.strip()
    seconds: float | None = None
    if _SHORT.fullmatch(cleaned.lower()):
        seconds = sum(
            float(number) * _UNITS[unit] for number, unit in _SHORT_PART.findall(cleaned.lower())
        )
    else:
        iso = _ISO.fullmatch(cleaned.upper())
        if iso is not None and any(iso.groupdict().values()) and not cleaned.upper().endswith("T"):
            seconds = sum(float(v) * _UNITS[k] for k, v in iso.groupdict().items() if v)
    if seconds is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: use e.g. 90s, 15m, 2h, 1d, 1h30m or ISO 8601 (PT15M)"
        )
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration must be longer than zero")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise argparse.ArgumentTypeError(f"{text!r}: too long a duration") from None


def json_argument(text: str) -> Any:
    try:
        return json_text.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg} at {exc.pos})") from None


@dataclass(frozen=True)
class Argument:
    """One argument: its flags and argparse keywords (the subset Airflow's ``Arg`` takes)."""

    flags: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(*self.flags, **self.options)


STORE = (
    Argument(
        ("--url",),
        {
            "metavar": "URL",
            "help": f"store URL, sqlite:////abs/path.db or postgresql://… (default: ${URL_VARIABLE})",
        },
    ),
    Argument(
        ("--conn-id",),
        {
            "dest": "conn_id",
            "metavar": "CONN_ID",
            "help": "an Airflow connection to the store (needs Airflow; the default without "
            "--url: atomic_store_default)",
        },
    ),
    Argument(
        ("--storage-table",),
        {
            "dest": "storage_table",
            "metavar": "NAME",
            "help": "with --url: the store's physical table (default: atomic_store_rows)",
        },
    ),
    Argument(("--json",), {"action": "store_true", "help": "print JSON (stable keys) for scripts"}),
)
TABLE = Argument(("table",), {"metavar": "TABLE", "help": "a logical table"})
WHERE = {
    "type": json_argument,
    "metavar": "JSON",
    "help": 'a filter in the operators\' where language, e.g. \'[{"field": "status", '
    '"operator": "equals", "value": "pending"}]\'',
}
MATCH = Argument(
    ("--match",), {"choices": ["all", "any"], "default": "all", "help": "all (AND) or any (OR)"}
)


@dataclass(frozen=True)
class CommandSpec:
    """One command; ``read_only`` ones open the store read-only (a typo creates nothing)."""

    name: str
    help: str
    arguments: tuple[Argument, ...]
    read_only: bool = True


COMMANDS = (
    CommandSpec("tables", "every logical table and its row count", STORE),
    CommandSpec(
        "stats",
        "a table's counts per status, oldest pending row, in-flight claims (exit 1: stale claims)",
        (
            TABLE,
            Argument(
                ("--stale-after",),
                {
                    "dest": "stale_after",
                    "type": duration,
                    "metavar": "DURATION",
                    "help": "flag and count claims older than this (90s, 15m, 2h, 1d, PT15M)",
                },
            ),
            Argument(
                ("--in-flight-limit",),
                {
                    "dest": "in_flight_limit",
                    "type": int,
                    "default": 50,
                    "metavar": "N",
                    "help": "list at most N in-flight claims, oldest first (default 50)",
                },
            ),
            *STORE,
        ),
    ),
    CommandSpec(
        "rows",
        "one page of a table's rows, in queue order, optionally filtered",
        (
            TABLE,
            Argument(("--where",), WHERE),
            MATCH,
            Argument(
                ("--limit",),
                {"type": int, "default": 50, "metavar": "N", "help": "rows per page (default 50)"},
            ),
            Argument(
                ("--offset",),
                {"type": int, "default": 0, "metavar": "N", "help": "rows to skip (default 0)"},
            ),
            *STORE,
        ),
    ),
    CommandSpec(
        "stale",
        "in-flight rows claimed longer ago than a duration (exit 1: some were found)",
        (
            TABLE,
            Argument(
                ("--older-than",),
                {
                    "dest": "older_than",
                    "type": duration,
                    "required": True,
                    "metavar": "DURATION",
                    "help": "claim age (90s, 15m, 2h, 1d, PT15M)",
                },
            ),
            Argument(
                ("--limit",),
                {"type": int, "default": 100, "metavar": "N", "help": "list at most N (100)"},
            ),
            *STORE,
        ),
    ),
    CommandSpec(
        "explain-claim",
        "the database's plan for a claim's row selection (nothing is claimed)",
        (
            TABLE,
            Argument(("--where",), {**WHERE, "required": True}),
            MATCH,
            Argument(
                ("--order-by",),
                {
                    "dest": "order_by",
                    "choices": ["createdAt", "recordTimestamp"],
                    "default": "createdAt",
                    "help": "the claim's order (default createdAt)",
                },
            ),
            Argument(
                ("--direction",),
                {"choices": ["asc", "desc"], "default": "asc", "help": "default asc"},
            ),
            Argument(
                ("--limit",),
                {"type": int, "default": 10, "metavar": "N", "help": "claim size (default 10)"},
            ),
            Argument(
                ("--generic",),
                {
                    "action": "store_true",
                    "help": "PostgreSQL: the plan a repeated claim settles on",
                },
            ),
            *STORE,
        ),
    ),
    CommandSpec(
        "migrate",
        "bring the store's schema to this release's version (run as the store's owner when "
        "workers may not alter its tables); creates the store if there is none",
        STORE,
        read_only=False,
    ),
)
