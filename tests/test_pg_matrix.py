"""The PostgreSQL matrix's plumbing: which binaries a server runs, and the page's two sections.

``make pg-matrix`` itself runs the database tiers on each line (scripts/pg_matrix.py); these
check what it relies on: a named ``bin/`` is used or refused, never swapped for another line,
and ``make compat`` and ``make pg-matrix`` each rewrite only their own part of
docs/compatibility.md.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest

from devkit.postgres_server import (
    PG_BIN_ENV,
    PostgresServer,
    PostgresServerError,
    find_server_binaries,
)
from scripts import compat_matrix, pg_matrix


def _version_of(bin_dir: Path) -> str:
    out = subprocess.run(
        [str(bin_dir / "postgres"), "--version"], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"\(PostgreSQL\) (\S+)", out)
    assert match is not None, out
    return match.group(1)


def test_a_named_bin_dir_without_the_binaries_is_refused_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(PostgresServerError, match=r"bin_dir=.*no executable initdb"):
        find_server_binaries(tmp_path)
    monkeypatch.setenv(PG_BIN_ENV, str(tmp_path))
    with pytest.raises(PostgresServerError, match=f"{PG_BIN_ENV}=.*no executable initdb"):
        PostgresServer()


@pytest.mark.postgres
def test_the_server_runs_the_binaries_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What every server of a matrix run relies on (the suite's and the tests' own)."""
    monkeypatch.delenv(PG_BIN_ENV, raising=False)
    machine_bin = find_server_binaries()[0].parent
    monkeypatch.setenv(PG_BIN_ENV, str(machine_bin))
    with PostgresServer() as server:
        assert server.bin_dir == machine_bin.resolve()
        with psycopg.connect(server.url) as conn:
            row = conn.execute("SHOW server_version").fetchone()
    assert row is not None
    assert row[0].split()[0] == _version_of(machine_bin)


def test_every_wheel_line_is_pinned_to_a_version_and_a_digest() -> None:
    majors = [line.major for line in pg_matrix.LINES]
    assert majors == ["13", "14", "15", "16", "18"]
    for line in pg_matrix.LINES:
        if line.wheel is None:
            continue
        assert re.fullmatch(r"[a-z-]+==\d+(\.\d+)+", line.wheel.requirement)
        assert re.fullmatch(r"[0-9a-f]{64}", line.wheel.sha256)
        assert line.wheel.bin_path.endswith("/bin")


def _result(major: str, summary: str) -> pg_matrix.Result:
    line = next(line for line in pg_matrix.LINES if line.major == major)
    return pg_matrix.Result(line, version=f"{major}.1", ok=True, summary=summary)


def test_the_pg_section_replaces_only_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "compatibility.md"
    page.write_text("# Compatibility\n\n| Airflow line |\n|---|\n| 3.3 |\n")
    monkeypatch.setattr(pg_matrix, "REPORT", page)
    pg_matrix.write_section([_result("18", "2 passed")])
    pg_matrix.write_section([_result("13", "1 passed"), _result("16", "5 passed")])
    pg_matrix.write_section([_result("16", "4 passed")])  # a line runs again
    text = page.read_text()
    assert text.startswith("# Compatibility\n\n| Airflow line |\n|---|\n| 3.3 |\n\n")
    assert text.count("## PostgreSQL lines") == 1
    rows = [row for row in text.splitlines() if re.match(r"\| \d+ \|", row)]
    assert [row.split("|")[1].strip() for row in rows] == ["13", "16", "18"]
    assert "4 passed" in rows[1] and "5 passed" not in text


def test_make_compat_keeps_the_pg_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "compatibility.md"
    page.write_text("# Compatibility\n\nan older Airflow table\n")
    monkeypatch.setattr(pg_matrix, "REPORT", page)
    monkeypatch.setattr(compat_matrix, "REPORT", page)
    pg_matrix.write_section([_result("16", "3 passed")])
    pg_section = page.read_text()[page.read_text().index(pg_matrix.SECTION_START) :]
    compat_matrix.write_report(["| Airflow line |", "| 3.3 |"], Path("airflow_atomic_store.whl"))
    text = page.read_text()
    assert "an older Airflow table" not in text and "| 3.3 |" in text
    assert "| 16 | 16.1 |" in pg_section and text.endswith(pg_section)


def test_a_line_in_a_private_checkout_is_copied_where_the_server_user_can_run_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root the server runs as ``postgres``, which cannot enter a checkout in a 0700
    directory (CI clones anywhere): the run then uses a copy of the line's installation."""
    private = tmp_path / "private"
    machine_bin = find_server_binaries()[0].parent
    installed = private / "checkout" / ".pg" / "15" / "pkg" / "bin"
    installed.mkdir(parents=True)
    for name in ("initdb", "postgres"):
        shutil.copy2(machine_bin / name, installed / name)
    (installed.parent.parent / "bin").symlink_to("pkg/bin")
    private.chmod(0o700)
    monkeypatch.setattr(pg_matrix, "CACHE", private / "checkout" / ".pg")
    with tempfile.TemporaryDirectory() as scratch_dir:  # in the system temp dir, as a run's
        scratch = Path(scratch_dir)
        runnable = pg_matrix.reachable(installed.parent.parent / "bin", scratch)
        _check_runnable(runnable, installed.parent.parent / "bin", scratch, machine_bin)


def _check_runnable(runnable: Path, linked: Path, scratch: Path, machine_bin: Path) -> None:
    """The server user can run what :func:`pg_matrix.reachable` returned."""
    if os.geteuid() != 0:  # the server runs as this user, who can run it where it is
        assert runnable == linked
        return
    assert runnable == scratch / "15" / "pkg" / "bin"
    probe = ["runuser", "-u", "postgres", "--", str(runnable / "postgres"), "--version"]
    assert _version_of(machine_bin) in subprocess.run(probe, capture_output=True, text=True).stdout


def test_every_test_a_line_leaves_out_exists_in_its_tiers() -> None:
    """A renamed test would otherwise run, and fail, on the line that cannot run it."""
    sources = "\n".join(
        path.read_text()
        for tier in pg_matrix.TIERS
        for path in (pg_matrix.PROJECT / tier).rglob("test_*.py")
    )
    names = {name for line in pg_matrix.LINES for name in line.deselect}
    assert names
    assert {name for name in names if f"def {name}(" not in sources} == set()
