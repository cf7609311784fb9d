"""The command line: ``python -m airflow_atomic_store`` and, on Airflow 3.2+, ``airflow atomic-store``.

``arguments`` declares every command's arguments once, ``commands`` is the
registry of what each command asks :class:`~airflow_atomic_store.inspection.StoreInspector`
and prints, ``render`` aligns the human-readable form, ``main`` opens the
store and maps errors to exit codes, ``airflow_commands`` hands the same
commands to Airflow's CLI. No Airflow import except for ``--conn-id``.
"""

from __future__ import annotations

from airflow_atomic_store.cli.main import build_parser, main, run

__all__ = ["build_parser", "main", "run"]
