"""The development harness: what the tests, the benchmarks, the e2e run and the demo share.

- ``postgres_server``: a throwaway PostgreSQL server on a free loopback port.
- ``processes``: one function run in several OS processes that start together.
- ``airflow_workers``: warm Airflow processes, forked from one zygote, that run DAGs at once.
- ``dagrun``: run a DAG with ``dag.test()`` and read back its states and XComs.
- ``examples``: the ``example_dags/`` folder loaded as Airflow loads a DAGs folder.

It imports nothing from ``tests/``, ``bench/``, ``e2e/`` or ``scripts/`` (a test pins
that), imports neither pytest nor Airflow at import time, and is not in the wheel.
"""
