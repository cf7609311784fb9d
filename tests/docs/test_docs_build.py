"""The documentation builds strictly: no broken link, no missing example block."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_docs_build_strictly(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert (tmp_path / "index.html").is_file()


def test_example_blocks_are_extracted_between_their_markers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        import include_example
    finally:
        sys.path.pop(0)
    source = tmp_path / "dag.py"
    source.write_text("x = 0\n    # [START demo]\n    y = 1\n    # [END demo]\n")
    monkeypatch.setattr(include_example, "ROOT", tmp_path)
    assert include_example.extract("dag.py", "demo") == "y = 1"
    with pytest.raises(include_example.ExampleNotFound):
        include_example.extract("dag.py", "other")
