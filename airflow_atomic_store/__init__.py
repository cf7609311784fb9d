"""Atomic update, claim and upsert for Airflow DAGs that share rows.

The store layer (``AtomicStore``) imports no Airflow, so producers and tests
outside Airflow can use it; the hook and operators load lazily on first use.
Importing the package refuses an installed Airflow older than 3.0 with a
``RuntimeError``, as Airflow's own providers do (read from the installed
metadata, so that Airflow itself is not imported).
"""

from __future__ import annotations

from importlib import metadata as _metadata
from typing import TYPE_CHECKING, Any

from airflow_atomic_store.versions import check_airflow_version, installed_airflow_version

_AIRFLOW_VERSION = installed_airflow_version()
if _AIRFLOW_VERSION is not None:
    check_airflow_version(_AIRFLOW_VERSION)

from airflow_atomic_store.exceptions import (  # noqa: E402  (after the floor, as providers do)
    AccessDeniedError,
    AtomicStoreError,
    ConnectionConfigError,
    DuplicateMemberError,
    IdempotencyKeyError,
    MutationError,
    ResultTooLargeError,
    SpecError,
    StoreLocationError,
    StoreUnavailableError,
)
from airflow_atomic_store.store import AtomicStore  # noqa: E402

if TYPE_CHECKING:
    from airflow_atomic_store.hooks.atomic_store import AtomicStoreHook
    from airflow_atomic_store.operators import (
        AtomicClaimOperator,
        AtomicUpdateManyOperator,
        AtomicUpdateOperator,
        AtomicUpsertManyOperator,
        AtomicUpsertOperator,
    )

try:  # the one version is pyproject.toml's, read back from the installed metadata
    __version__ = _metadata.version("airflow-atomic-store")
except _metadata.PackageNotFoundError:  # imported from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "AccessDeniedError",
    "AtomicClaimOperator",
    "AtomicStore",
    "AtomicStoreError",
    "AtomicStoreHook",
    "AtomicUpdateManyOperator",
    "AtomicUpdateOperator",
    "AtomicUpsertManyOperator",
    "AtomicUpsertOperator",
    "ConnectionConfigError",
    "DuplicateMemberError",
    "IdempotencyKeyError",
    "MutationError",
    "ResultTooLargeError",
    "SpecError",
    "StoreLocationError",
    "StoreUnavailableError",
]

_LAZY = {
    "AtomicStoreHook": "airflow_atomic_store.hooks.atomic_store",
    "AtomicUpdateOperator": "airflow_atomic_store.operators",
    "AtomicClaimOperator": "airflow_atomic_store.operators",
    "AtomicUpsertOperator": "airflow_atomic_store.operators",
    "AtomicUpsertManyOperator": "airflow_atomic_store.operators",
    "AtomicUpdateManyOperator": "airflow_atomic_store.operators",
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
