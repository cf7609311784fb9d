"""The backend contract's suite: every backend is driven through ``store/contract.py`` only.

River's ``riverdrivertest`` is the model: a new backend is written against these
tests, not by reading the other backends. The fixture opens a backend from the
``store_url`` fixture (both backends); the tests call the protocol's methods with
request values (``store/contract.py``) and check the answers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_atomic_store.store.atomic_store import open_backend
from airflow_atomic_store.store.contract import DEFAULT_STORAGE_TABLE, Backend


@pytest.fixture
def contract_backend(store_url: str) -> Iterator[Backend]:
    options = {"storage_table": DEFAULT_STORAGE_TABLE, "read_only": False}
    backend = open_backend(store_url, options)
    try:
        yield backend
    finally:
        backend.close()
