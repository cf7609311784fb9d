"""A SQLite store where none can ever open is a configuration error, not an outage.

SQLite says "unable to open database file" for a directory at the store's path and
for a read-only filesystem, as it does for a brief shortage; only the last is worth
a retry. Both permanent cases raise ``StoreLocationError`` (a ``ConnectionConfigError``
that operators fail without retries: tests/airflow/test_dag_runs_store_location.py).
SQLite only: a PostgreSQL store has no path.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_atomic_store import AtomicStore, StoreUnavailableError
from airflow_atomic_store.exceptions import ConnectionConfigError, StoreLocationError


def _attempts(store: AtomicStore) -> dict[str, object]:
    return {
        "get": lambda: store.get("t", "k"),
        "put": lambda: store.put("t", "k", {"n": 1}),
        "claim": lambda: store.atomic_claim("t"),
    }


def _refused_as_a_location(url: str, shown: str) -> None:
    with AtomicStore(url) as store:
        for verb, attempt in _attempts(store).items():
            with pytest.raises(StoreLocationError) as raised:
                attempt()  # type: ignore[operator]
            error = raised.value
            assert isinstance(error, ConnectionConfigError), verb
            assert not isinstance(error, StoreUnavailableError), verb
            assert shown in str(error), verb


def test_a_directory_at_the_store_url_is_a_location_error(tmp_path: Path) -> None:
    directory = tmp_path / "store.db"
    directory.mkdir()
    _refused_as_a_location(f"sqlite:///{directory}", f"{directory} is a directory")
    assert list(directory.iterdir()) == []


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs holding a store, remounted read-only (the suite runs as root, as CI does)."""
    mount = tmp_path / "ro"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        with AtomicStore(f"sqlite:///{mount / 'existing.db'}") as store:
            store.put("t", "k", {"n": 0})
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.parametrize("name", ["existing.db", "new.db", "sub/new.db"])
def test_a_store_on_a_read_only_filesystem_is_a_location_error(
    read_only_mount: Path, name: str
) -> None:
    _refused_as_a_location(f"sqlite:///{read_only_mount / name}", "read-only filesystem")


def test_a_missing_file_in_a_writable_directory_is_still_created(tmp_path: Path) -> None:
    with AtomicStore(f"sqlite:///{tmp_path / 'sub' / 'store.db'}") as store:
        store.put("t", "k", {"n": 1})
        assert store.get("t", "k") == {"n": 1}
