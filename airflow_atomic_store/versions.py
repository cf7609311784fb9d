"""Version floors and their checks, without importing Airflow.

The package's ``__init__`` refuses an Airflow older than :data:`MIN_AIRFLOW_VERSION`
when it is imported, as Airflow's own providers do, yet the store layer must import
without Airflow: so the floor reads the installed distribution's metadata, not
``airflow.__version__`` (``compat`` checks that one again when the Airflow layer loads).
"""

from __future__ import annotations

import re
from importlib import metadata

MIN_AIRFLOW_VERSION = "3.0.0"
#: The first ``apache-airflow-providers-postgres`` whose ``PostgresHook.get_conn()``
#: connects through ``_create_connection``, which the store overrides (to connect with
#: psycopg 3 on Airflow 3.0, and to read the trigger's ``LISTEN`` arguments); it also
#: has ``USE_PSYCOPG3`` (6.3.0+). pyproject.toml declares the same floor.
MIN_POSTGRES_PROVIDER_VERSION = "6.8.0"
#: ``apache-airflow`` is Airflow 2 itself and Airflow 3's meta package; an Airflow 3
#: installed without it still has ``apache-airflow-core``.
_AIRFLOW_DISTRIBUTIONS = ("apache-airflow", "apache-airflow-core")


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: ``"3.1.0rc2"`` -> ``(3, 1, 0)``."""
    found = re.match(r"\s*v?(\d+(?:\.\d+)*)", version)
    if found is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part) for part in found.group(1).split("."))


def older(version: str, minimum: str) -> bool:
    """Whether ``version`` is a release before ``minimum`` (a pre-release counts as its release).

    As the official providers compare ``base_version``: ``3.1.0rc2`` is ``3.1.0``.
    """
    low, found = release(minimum), release(version)
    width = max(len(low), len(found))
    return found + (0,) * (width - len(found)) < low + (0,) * (width - len(low))


def check_airflow_version(version: str) -> None:
    """Raise ``RuntimeError`` if ``version`` is older than :data:`MIN_AIRFLOW_VERSION`."""
    if older(version, MIN_AIRFLOW_VERSION):
        raise RuntimeError(
            f"The package `airflow-atomic-store` needs Apache Airflow {MIN_AIRFLOW_VERSION}+; "
            f"Apache Airflow {version} is installed"
        )


def check_postgres_provider_version(version: str) -> None:
    """Raise ``RuntimeError`` if ``version`` is older than :data:`MIN_POSTGRES_PROVIDER_VERSION`.

    An older provider connects without ``_create_connection``: the store's override
    would be ignored (psycopg2 on Airflow 3.0, a trigger ``LISTEN`` to libpq's defaults).
    """
    if older(version, MIN_POSTGRES_PROVIDER_VERSION):
        raise RuntimeError(
            "The package `airflow-atomic-store` needs apache-airflow-providers-postgres "
            f"{MIN_POSTGRES_PROVIDER_VERSION}+; {version} is installed"
        )


def installed_airflow_version() -> str | None:
    """The installed Airflow's version from its metadata; None where Airflow is absent."""
    for distribution in _AIRFLOW_DISTRIBUTIONS:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return None
