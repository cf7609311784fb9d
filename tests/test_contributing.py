"""The contributor's guide and hooks say what the repository does: CONTRIBUTING.md, pre-commit."""

from __future__ import annotations

import ast
import re
import shlex
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


def _pytest_command(target: str) -> list[str]:
    """The pytest command ``make TARGET`` runs (``make -n``: printed, not run)."""
    printed = subprocess.run(
        ["make", "-n", "--no-print-directory", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    (line,) = [line for line in printed.splitlines() if " -m pytest " in line]
    command = shlex.split(line.split(";")[0])
    return command[command.index("pytest") + 1 :]  # pytest's own arguments


def test_make_test_leaves_out_only_the_slow_cases_and_ci_runs_every_test() -> None:
    quick, everything = _pytest_command("test"), _pytest_command("test-all")
    assert quick[quick.index("-m") + 1] == "not slow"
    assert "-m" not in everything
    assert [arg for arg in quick if arg not in ("-m", "not slow")] == everything
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test-all$", ci, re.M)
    assert not re.search(r"^make test$", ci, re.M)  # test-all already runs all of it


def _test_functions(tree: ast.Module) -> dict[str, bool]:
    """Each test function of a module, and whether every one of its cases is marked slow."""

    def slow(decorator: ast.expr) -> bool:
        return ast.unparse(decorator) == "pytest.mark.slow"

    module_slow = any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
        and "pytest.mark.slow" in ast.unparse(node.value)
        for node in tree.body
    )
    return {
        node.name: module_slow or any(slow(d) for d in node.decorator_list)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


def test_every_file_with_a_slow_test_keeps_a_quick_one_in_make_test() -> None:
    """A test marked slow as a whole is a longer case of something another test of its
    file proves in ``make test`` (the marker's meaning in pyproject.toml)."""
    only_slow = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        functions = _test_functions(ast.parse(path.read_text()))
        if any(functions.values()) and all(functions.values()):
            only_slow.append(str(path.relative_to(ROOT)))
    assert only_slow == []


def test_the_slow_test_finder_reads_decorators_and_module_marks() -> None:
    source = (
        "import pytest\n"
        "@pytest.mark.slow\n"
        "def test_long(): ...\n"
        "@pytest.mark.parametrize('n', [0, pytest.param(1, marks=pytest.mark.slow)])\n"
        "def test_rounds(n): ...\n"
    )
    assert _test_functions(ast.parse(source)) == {"test_long": True, "test_rounds": False}
    marked = "import pytest\npytestmark = [pytest.mark.slow]\ndef test_a(): ...\n"
    assert _test_functions(ast.parse(marked)) == {"test_a": True}
