"""The development harness: what the tests, the benchmarks, the e2e run and the demo share.

- ``postgres_server``: a throwaway PostgreSQL server on a free loopback port.
- ``standby``: a primary and its streaming standby (synchronous or not), for failovers.
- ``relay``: a TCP relay on loopback that delays, holds and cuts what it carries.
- ``processes``: one function run in several OS processes that start together.
- ``airflow_workers``: warm Airflow processes, forked from one zygote, that run DAGs at once.
- ``dagrun``: run a DAG with ``dag.test()`` and read back its states and XComs.
- ``examples``: the ``example_dags/`` folder loaded as Airflow loads a DAGs folder.
- ``late_writer``: a row put into a store by another OS process, after a delay or a receipt.

It imports nothing from ``tests/``, ``bench/``, ``e2e/`` or ``scripts/``, so every one of
them can use it; it imports neither pytest nor Airflow at import time, because spawned
children (the zygote) import it before they set ``AIRFLOW_HOME``. tests/test_layout.py
pins both. It is not in the wheel (tests/test_packaging.py).
"""
