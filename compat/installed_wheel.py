"""A pytest plugin for `make compat`: prove the tests import the installed wheel.

The matrix runs a copy of ``tests/`` from a temporary directory with
``--import-mode=importlib``, so no source tree is on ``sys.path``; this plugin
shows where ``airflow_atomic_store`` was imported from in the report header and
fails the session at once if that is not the venv's site-packages.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import pytest


def _package_file() -> Path:
    import airflow_atomic_store  # imports no Airflow: safe before AIRFLOW_HOME is set

    return Path(airflow_atomic_store.__file__).resolve()


def pytest_report_header() -> list[str]:
    from importlib.metadata import version

    return [
        f"airflow_atomic_store: {_package_file()}",
        f"apache-airflow {version('apache-airflow')}, airflow-atomic-store "
        f"{version('airflow-atomic-store')}, python {sys.version.split()[0]}",
    ]


def pytest_sessionstart(session: pytest.Session) -> None:
    site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
    where = _package_file()
    if site_packages not in where.parents:
        raise pytest.UsageError(
            f"airflow_atomic_store was imported from {where}, not from the installed wheel "
            f"in {site_packages}"
        )
