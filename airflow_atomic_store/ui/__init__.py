"""The "Atomic Store" page in the Airflow UI: a FastAPI app the API server mounts (see plugin)."""
