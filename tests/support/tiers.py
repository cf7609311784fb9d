"""What ``make test`` leaves to ``make test-all``: the ``slow`` marker (pyproject.toml).

``make test`` is the command a contributor runs after each change: every behaviour at
least once, on both backends. ``make test-all`` (what ``.ci/run`` runs) adds the cases
marked ``slow``: more rounds of a race, the same faults through another path, the whole
benchmark harness. A test without the marker runs in both.

``postgres_case_in_test_all`` is for a test whose subject lies above the store (Airflow's
own command line, say): its SQLite case runs in ``make test``, its PostgreSQL case only
in ``make test-all``, since what the store does on PostgreSQL underneath is proven by
the store's own PostgreSQL tests in ``make test``.
"""

from __future__ import annotations

import pytest

__all__ = ["postgres_case_in_test_all"]

postgres_case_in_test_all = pytest.mark.parametrize(
    "backend",
    [
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=[pytest.mark.postgres, pytest.mark.slow]),
    ],
    indirect=True,
)
