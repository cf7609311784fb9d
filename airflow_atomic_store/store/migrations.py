"""Schema versions: what a store records, and the numbered migrations that bring it forward.

Users' stores outlive releases, so every layout change ships as a migration rather
than as an edit that only new stores get (River's ``rivermigrate``, procrastinate's
migrations). A store records each version it reached in ``{table}_migrations`` (per
storage table: one database may hold several stores). Version 1 is the layout
of a3d0ad4, the last one made without a record; version N > 1 is the file
``store/<backend>/migrations/NNNN_<what>.sql`` of each backend, which turns a
version N-1 store into a version N one. A new store is made at the latest version
straight from the backend's schema files, so those files and the migrations must
agree: ``tests/integration/test_schema_versions.py`` compares a version 1 store,
migrated, with a new one.

What opening does (each backend's connection module, under its schema lock:
PostgreSQL's advisory lock, SQLite's write transaction):

* a store at the latest version opens; what is missing of it (a dropped table or
  function) is created, as before versions were recorded;
* an older one is migrated, each step in the transaction that records it, when the
  role may alter its tables; otherwise the open fails with
  :class:`~airflow_atomic_store.exceptions.SchemaVersionError` naming the command
  (``airflow atomic-store migrate``) that the store's owner runs once;
* one made before versions were recorded (no ``_migrations``) counts as version 1
  when its rows table has version 1's key column, and gets its record then;
* a newer one refuses to open: this release would misread it;
* a read-only open (inspection, the CLI's reads, the UI page) never migrates: it
  reads a store at the latest version only (an unrecorded one counts as 1) and
  refuses any other with the same error.

Writing a migration: ``{table}`` is the storage table's quoted name and
``{table_<suffix>}`` that of its ``<suffix>`` object (``{table_receipts}``), and
``{name_<suffix>}`` that object's name as a string literal; other braces are doubled. It runs inside a transaction (so no ``CREATE INDEX
CONCURRENTLY``) and must tolerate a missing side table (``IF EXISTS``): whatever
is missing afterwards is created from the current schema files. On SQLite each
statement is a ``-- name:`` section of its own (``executescript`` would commit).
Both backends number the same versions; a version with nothing to change on one
of them is a file with a comment.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from airflow_atomic_store.exceptions import SchemaVersionError

#: The first recorded version: the layout a3d0ad4 made (and every store made before).
BASELINE = 1
#: What the store's owner runs to migrate a store its workers may not alter.
MIGRATE_COMMAND = "airflow atomic-store migrate (or python -m airflow_atomic_store migrate)"
_FILE = re.compile(r"(\d{4})_(\w+)\.sql")


@dataclass(frozen=True)
class Migration:
    """One step: ``text`` turns a store at ``version - 1`` into one at ``version``."""

    version: int
    name: str
    text: str


@dataclass(frozen=True)
class Migrated:
    """What one open (or ``migrate``) found and did.

    ``before`` is None for a store this call created; ``applied`` names the steps
    run, ``"1_recorded"`` when a store made before versions were recorded got its
    record.
    """

    storage_table: str
    before: int | None
    after: int
    applied: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "storage_table": self.storage_table,
            "version_before": self.before,
            "version": self.after,
            "applied": list(self.applied),
        }


def load(package: str) -> tuple[Migration, ...]:
    """A backend package's ``migrations/NNNN_<what>.sql``, in order, numbered from 2 on."""
    folder = resources.files(package).joinpath("migrations")
    found = []
    if folder.is_dir():
        for entry in folder.iterdir():
            match = _FILE.fullmatch(entry.name)
            if match is not None:
                text = entry.read_text(encoding="utf-8")
                found.append(Migration(int(match[1]), match[2], text))
    found.sort(key=lambda migration: migration.version)
    numbers = [migration.version for migration in found]
    if numbers != list(range(BASELINE + 1, BASELINE + 1 + len(found))):
        raise RuntimeError(f"{package}'s migrations are numbered {numbers}: from 2, no gaps")
    return tuple(found)


def latest(migrations: Sequence[Migration]) -> int:
    """The version a store reaches by ``migrations``: this release's."""
    return migrations[-1].version if migrations else BASELINE


def holes(table: str, quote: Callable[[str], str]) -> dict[str, str]:
    """A migration's holes: ``table`` and ``table_<suffix>``, quoted by the driver, and
    ``name_<suffix>``: the same object's name as a string literal (a catalog row naming it;
    storage table names are plain identifiers, so no quote needs doubling)."""

    class Names(dict[str, str]):
        def __missing__(self, key: str) -> str:
            if key.startswith("table_"):
                return quote(f"{table}{key.removeprefix('table')}")
            if key.startswith("name_"):
                return f"'{table}{key.removeprefix('name')}'"
            raise KeyError(key)

    return Names(table=quote(table))


def refuse_newer(found: int | None, migrations: Sequence[Migration], table: str) -> None:
    """A store migrated by a newer release: this one would misread it."""
    expected = latest(migrations)
    if found is not None and found > expected:
        raise SchemaVersionError(
            f"the store {table!r} is at schema version {found}, newer than this "
            f"airflow-atomic-store's {expected}: a newer release migrated it. Install that "
            "release (or a later one) everywhere the store is used: workers, the triggerer, "
            "the DAG processor and this machine; nothing was changed",
            found=found,
            expected=expected,
        )


def pending(found: int | None, migrations: Sequence[Migration]) -> tuple[Migration, ...]:
    """The steps from ``found`` (None: a store being created, which needs none)."""
    if found is None:
        return ()
    return tuple(migration for migration in migrations if migration.version > found)


def records(
    found: int | None, recorded: bool, migrations: Sequence[Migration]
) -> list[dict[str, Any]]:
    """The rows ``{table}_migrations`` gets: ``version``, ``name``."""
    if found is None:
        return [{"version": latest(migrations), "name": "created"}]
    rows = [] if recorded else [{"version": found, "name": "recorded"}]
    return rows + [{"version": m.version, "name": m.name} for m in pending(found, migrations)]


def applied(found: int | None, recorded: bool, migrations: Sequence[Migration]) -> tuple[str, ...]:
    """``Migrated.applied`` for these records."""
    if found is None:
        return ()
    return tuple(f"{row['version']}_{row['name']}" for row in records(found, recorded, migrations))


def behind(
    found: int | None, migrations: Sequence[Migration], table: str, why: str
) -> SchemaVersionError:
    """A store this open may not bring forward (``why``: the role's rights, read-only)."""
    expected = latest(migrations)
    state = (
        f"is at schema version {found}"
        if found is not None
        else "has no recorded schema version (made before 0.1.0 recorded them; its layout "
        f"is version {BASELINE})"
    )
    return SchemaVersionError(
        f"the store {table!r} {state}, this airflow-atomic-store needs {expected}, and {why}. "
        f"Run {MIGRATE_COMMAND} once as the store's owner (a role that may alter its "
        "tables), then open it again; nothing was changed",
        found=found,
        expected=expected,
    )


def unknown_layout(table: str, column: str, migrations: Sequence[Migration]) -> SchemaVersionError:
    """An unrecorded rows table without version 1's key column: no version fits it."""
    return SchemaVersionError(
        f"the store {table!r} has no recorded schema version and its rows table has no "
        f"{column!r} column, so it is not version {BASELINE}'s layout (a pre-release store, "
        "or another program's table of that name): migrate it by hand or give this store "
        "another storage_table; nothing was changed",
        found=None,
        expected=latest(migrations),
    )
