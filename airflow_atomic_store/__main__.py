"""``python -m airflow_atomic_store``: the command line (``airflow_atomic_store/cli``)."""

from __future__ import annotations

from airflow_atomic_store.cli import main

raise SystemExit(main())
