"""A real Airflow 3 deployment, end to end: ``make e2e`` (``python -m e2e``).

One throwaway PostgreSQL server holds two databases: Airflow's metadata database
and the atomic store. On top of it run the Airflow components that version 3
needs -- API server (REST API and execution API), scheduler with the
LocalExecutor, DAG processor, triggerer -- each in its own session, with
``AIRFLOW_HOME`` under ``.e2e/`` in the project. The scenario drives the
example DAGs through the REST API only, SIGKILLs one dispatcher task process
mid-batch and one claim task right after its claim committed (its retry must
replay the batch), and then asserts on what the store holds.

Modules:

``deployment``  the PostgreSQL server, the configuration and the components
``api``         a small client of Airflow's public REST API
``tasks``       finding a running task's process (to kill it)
``driver``      triggering runs and reading their states (what every phase uses)
``scenario``    what is triggered, killed and waited for
``claim_retry`` the claim killed after its commit and retried (DAG: ``scenario_dags/``)
``checks``      the assertions on the store and the summary
"""
