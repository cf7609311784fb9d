"""Errors raised by airflow-atomic-store.

    AtomicStoreError                 every error this package raises
    ├── SpecError                    a where/set/path/operator/limit/order is invalid;
    │   │                            raised before any I/O, retrying cannot fix it
    │   └── DuplicateMemberError     JSON text names one member of an object twice
    │                                (also a json.JSONDecodeError)
    ├── MutationError                a mutation cannot apply to the stored value;
    │                                nothing was written, retrying cannot fix it
    ├── IdempotencyKeyError          an idempotency key was reused for another
    │                                primitive, table or row; nothing was written
    ├── ResultTooLargeError          a keyed call's result is too large for its
    │                                receipt; nothing was written
    ├── SchemaVersionError           the store's schema is newer than this release,
    │                                or older and this open may not migrate it;
    │                                nothing was changed; a retry succeeds once the
    │                                owner migrated it (or the release is upgraded)
    ├── ConnectionConfigError        the Airflow connection is missing or unusable;
    │                                opened read-only, no store is where it points
    │   ├── AccessDeniedError        the database refused the credentials or a
    │   │                            permission (wrong password, pg_hba.conf, no
    │   │                            CONNECT or table privilege, unknown role or
    │   │                            database); retrying cannot fix it
    │   └── StoreLocationError       no store can ever open where the connection
    │                                points (a SQLite URL naming a directory, or on
    │                                a read-only filesystem); retrying cannot fix it
    └── StoreUnavailableError        the database could not be reached or the
                                     statement failed for a transient reason;
                                     Airflow's retries are the right answer

An empty result (``updated: false``, ``claimed: []``, ``inserted: false``) is
never an error: primitives report it in their return value.
"""

from __future__ import annotations

import json


class AtomicStoreError(Exception):
    """The atomic store failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class SpecError(AtomicStoreError, ValueError):
    """The spec is invalid."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class DuplicateMemberError(SpecError, json.JSONDecodeError):
    """JSON text gives one member of an object twice: which value was meant is unknowable.

    Python's parser keeps the last one silently, so a ``where`` typed twice
    (``{"field": "status", "field": "owner"}``) would filter on another field than
    the author read. Also a ``json.JSONDecodeError``: code that reports bad JSON
    text reports this too, with the member's name.
    """

    def __init__(self, field: str, member: str, text: str, position: int) -> None:
        self.member = member
        self.field = field
        self.problem = f"member {member!r} appears twice in one object"
        json.JSONDecodeError.__init__(self, self.problem, text, position)  # msg, doc, pos
        self.args = (f"{field}: {self.problem}",)


class MutationError(AtomicStoreError):
    """A mutation cannot apply to the stored value; nothing was written."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class IdempotencyKeyError(AtomicStoreError):
    """An idempotency key was reused for another primitive, table or row; nothing was written."""

    def __init__(self, key: str, primitive: str, table: str, target: str) -> None:
        self.key = key
        where = f"table {table!r}" + (f", row {target!r}" if target else "")
        super().__init__(
            f"idempotency key {key!r} was already used for another call than this "
            f"{primitive} on {where}; a key serves one primitive on one row (or one "
            "claim on one table): use a new key for a new call"
        )


class ResultTooLargeError(AtomicStoreError):
    """A keyed call's result is too large to record in its receipt; nothing was written.

    The receipt holds the whole result (a claim's rows with their values) so that a
    repeat returns it; PostgreSQL cannot hold a ``jsonb`` value of 256 MB or more,
    and both backends refuse the same results (``store/contract.py``).
    """

    def __init__(self, limit: int, size: int | None = None) -> None:
        self.limit = limit
        self.size = size
        measured = f"{size} bytes, " if size is not None else ""
        super().__init__(
            f"the result of this keyed call is {measured}more than the receipt limit of "
            f"{limit} bytes; nothing was applied: claim fewer rows (limit) or call without "
            "an idempotency key"
        )


class SchemaVersionError(AtomicStoreError):
    """The store's schema version is not this release's, and this open cannot change that.

    ``found`` is the store's version (None: made before versions were recorded),
    ``expected`` this release's. A newer store needs this release upgraded; an older
    one needs ``airflow atomic-store migrate`` run by its owner (``store/migrations.py``).
    Operators let Airflow retry it: during a rolling upgrade the owner's migration may
    land between two tries.
    """

    def __init__(self, message: str, *, found: int | None, expected: int) -> None:
        self.found = found
        self.expected = expected
        super().__init__(message)


class ConnectionConfigError(AtomicStoreError):
    """The store's connection is missing or misconfigured."""


class AccessDeniedError(ConnectionConfigError):
    """The database refused the store's credentials or permissions; retrying cannot fix it."""


class StoreLocationError(ConnectionConfigError):
    """No store can ever open where the connection points; retrying cannot fix it."""


class StoreUnavailableError(AtomicStoreError):
    """The database could not complete the statement; a retry may succeed."""
