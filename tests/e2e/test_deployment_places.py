"""Where ``make e2e`` puts its database server, and that the next run finds it there.

Run as root, the server runs as the ``postgres`` user, which cannot enter a project
cloned into a private directory (``git clone . "$(mktemp -d)/c"``). The server then
lives in the system temp dir, and a link in ``.e2e/`` names it for the reaper.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from devkit.postgres_server import PostgresServer
from e2e.deployment import SERVER_ELSEWHERE, reap_previous_run


@pytest.fixture
def open_directory() -> Iterator[Path]:
    """A directory in the system temp dir (reachable by every user until chmod'ed)."""
    directory = Path(tempfile.mkdtemp(prefix="atomic-place-"))
    try:
        yield directory
    finally:
        directory.chmod(0o755)
        subprocess.run(["rm", "-rf", str(directory)], check=False)


@pytest.mark.parametrize("mode", [0o755, 0o700], ids=["open", "private"])
def test_the_server_runs_in_base_dir_when_its_user_can_enter_it_and_elsewhere_otherwise(
    open_directory: Path, mode: int
) -> None:
    open_directory.chmod(mode)
    can_enter = mode == 0o755 or os.geteuid() != 0  # not root: the server runs as us
    with PostgresServer(dbname="placed", base_dir=open_directory) as server:
        assert server.directory is not None
        assert (open_directory in server.directory.parents) is can_enter
        with psycopg.connect(server.url) as connection:
            assert connection.execute("SELECT 1").fetchone() == (1,)


def test_the_reaper_kills_and_removes_what_a_run_left_in_the_linked_server_directory(
    tmp_path: Path, open_directory: Path
) -> None:
    root = tmp_path / ".e2e"
    root.mkdir()
    elsewhere = open_directory / "atomic-pg-left"
    elsewhere.mkdir()
    (root / SERVER_ELSEWHERE).symlink_to(elsewhere)
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], cwd=elsewhere)
    try:
        said: list[str] = []
        reap_previous_run(root, said.append)
        # Killed long before its sleep ends (the reaper also collected its exit status).
        left.wait(timeout=30)
        assert not psutil.pid_exists(left.pid)
        assert said == ["killed 1 process(es) left by a previous run"]
        assert not root.exists() and not elsewhere.exists()
    finally:
        if psutil.pid_exists(left.pid) and left.poll() is None:
            left.kill()
