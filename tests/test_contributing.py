"""The contributor's guide and hooks say what the repository does: CONTRIBUTING.md, pre-commit."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text()


def _make_recipe(target: str) -> list[str]:
    """The commands of ``target`` in the Makefile, ``$(BIN)`` spelled out as ``.venv/bin``."""
    recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert recipe is not None, f"no {target} target in the Makefile"
    return [line.strip().replace("$(BIN)", ".venv/bin") for line in recipe.group(1).splitlines()]


def test_the_pre_commit_hooks_run_what_make_lint_runs() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert {repo["repo"] for repo in config["repos"]} == {"local"}  # nothing fetched at commit
    entries = [hook["entry"] for hook in hooks]
    # ruff takes the staged files where `make lint` gives it "."; mypy checks its packages.
    lint = [command.removesuffix(" .") for command in _make_recipe("lint")]
    assert entries == lint
    assert all(hook["language"] == "system" for hook in hooks)


def test_the_pre_commit_config_is_valid() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "pre_commit", "validate-config", ".pre-commit-config.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_the_guide_gives_every_top_level_directory_a_line() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    directories = {path.split("/", 1)[0] for path in tracked if "/" in path}
    described = set(re.findall(r"^- `([^`/]+)/", CONTRIBUTING, re.M))
    assert directories == described


def test_every_make_target_the_guide_names_exists() -> None:
    named = set(re.findall(r"`make ([a-z0-9-]+)", CONTRIBUTING))
    assert {"demo", "test", "e2e", "compat", "bench"} <= named
    makefile = (ROOT / "Makefile").read_text()
    missing = {target for target in named if not re.search(rf"^{target}:", makefile, re.M)}
    assert missing == set()


def test_every_test_tier_the_guide_names_exists() -> None:
    tiers = set(re.findall(r"pytest (tests/[a-z_]+)", CONTRIBUTING))
    assert {"tests/unit", "tests/integration", "tests/airflow", "tests/example_dags"} <= tiers
    on_disk = {f"tests/{path.name}" for path in (ROOT / "tests").iterdir() if path.is_dir()}
    assert tiers <= on_disk
