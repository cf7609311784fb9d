"""What may import what: the harness and the tools stand on their own, the package on nothing.

``devkit/`` is what the tests, the benchmarks, the e2e run and the demo share, so it
must not lean on any of them; the tools must not lean on the tests; the shipped package
on none of these. Read from the source (every ``import``, also those inside functions,
module names given as strings, as for ``python -m``, and the imports of Python source held
in a string, as for ``python -c``), not from ``sys.modules``: a lazy import that a run did
not reach still counts. What importing ``devkit`` loads is
seen in a fresh interpreter: spawned children import it before Airflow is configured.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("bench", "e2e", "scripts")
#: A dotted module name in a string, as ``python -m devkit.late_writer`` takes it.
MODULE_STRING = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
#: An import statement on a line of source held in a string, as ``python -c`` runs it.
SOURCE_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+([A-Za-z_][\w.]*)[ \t]+import|import[ \t]+([A-Za-z_][\w.]*))",
    re.MULTILINE,
)


def _imported(source: str, package: tuple[str, ...]) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for every module ``source`` (a module of ``package``) imports."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the file's own package
                base = package[: len(package) - node.level + 1]
                yield node.lineno, ".".join([*base, *([node.module] if node.module else [])])
            else:
                yield node.lineno, node.module or ""
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if MODULE_STRING.match(node.value):
                yield node.lineno, node.value
            for match in SOURCE_IMPORT.finditer(node.value):
                yield node.lineno, match.group(1) or match.group(2)


def _imports_of(top: str, forbidden: tuple[str, ...]) -> list[str]:
    sources = sorted((ROOT / top).rglob("*.py"))
    assert sources, f"no Python files under {top}/"
    return [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sources
        for line, module in _imported(path.read_text(), path.relative_to(ROOT).parts[:-1])
        if module.split(".")[0] in forbidden
    ]


def test_the_harness_imports_none_of_the_tests_tools_or_scripts() -> None:
    assert _imports_of("devkit", ("tests", *TOOLS)) == []


def test_the_harness_imports_neither_pytest_nor_airflow_when_imported() -> None:
    modules = sorted(f"devkit.{path.stem}" for path in (ROOT / "devkit").glob("[!_]*.py"))
    probe = (
        f"import sys\nimport {', '.join(modules)}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'airflow', 'pytest', 'tests'}))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[]"


@pytest.mark.parametrize("tool", TOOLS)
def test_the_benchmarks_e2e_and_the_demo_import_nothing_from_the_tests(tool: str) -> None:
    assert _imports_of(tool, ("tests",)) == []


def _import_graph(package: Path) -> dict[str, set[str]]:
    """Which modules of ``package`` each of its modules imports (lazily, or for typing, too).

    ``from e2e import checks`` is an edge to ``e2e.checks``; an import of the package
    itself (``e2e/__init__.py``) is left out, as it imports nothing of its own.
    """
    top = package.name
    paths = {
        top if path.stem == "__init__" else f"{top}.{path.stem}": path
        for path in sorted(package.glob("*.py"))
    }
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                edges.add(node.module)
                edges.update(f"{node.module}.{alias.name}" for alias in node.names)
        graph[name] = {edge for edge in edges if edge in paths and edge not in (name, top)}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """A cycle for each way back the depth-first walk finds, as the modules along it."""
    found: list[list[str]] = []
    done: set[str] = set()

    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            found.append([*trail[trail.index(module) :], module])
            return
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, [*trail, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    return found


def test_the_e2e_modules_import_one_another_without_a_cycle() -> None:
    graph = _import_graph(ROOT / "e2e")
    assert {"e2e.scenario", "e2e.driver", "e2e.semaphore_phase"} <= set(graph)
    assert "e2e.semaphore_phase" in graph["e2e.scenario"]  # the reader sees the phases
    assert _cycles(graph) == []


def test_the_cycle_finder_sees_a_cycle_through_typing_only_and_lazy_imports(
    tmp_path: Path,
) -> None:
    package = tmp_path / "e2e"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "api.py").write_text("import json\n")
    (package / "scenario.py").write_text("from e2e import api, phase\n")
    (package / "phase.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from e2e.scenario import Driver\n"
    )
    (package / "helper.py").write_text("def later():\n    from e2e.scenario import run\n")
    graph = _import_graph(package)
    assert graph["e2e.scenario"] == {"e2e.api", "e2e.phase"}
    assert _cycles(graph) == [["e2e.scenario", "e2e.phase", "e2e.scenario"]]
    (package / "phase.py").write_text("import e2e.api\n")
    assert _cycles(_import_graph(package)) == []


@pytest.mark.parametrize("shipped", ["airflow_atomic_store", "example_dags"])
def test_the_package_imports_neither_the_harness_nor_the_tests_nor_the_tools(shipped: str) -> None:
    assert _imports_of(shipped, ("devkit", "tests", *TOOLS)) == []


def test_the_import_reader_sees_lazy_relative_and_module_string_imports() -> None:
    source = (
        "import json\n"
        "def later():\n"
        "    from tests.support import workers\n"
        "    from .dagrun import new_dag\n"
        "    from . import processes\n"
        "    return ['python', '-m', 'bench.airflow_dispatch']\n"
        'CHILD = """\n'
        "import sys, time\n"
        "from tests.support.late_writer import receipt_exists\n"
        '"""\n'
    )
    found = {module for _, module in _imported(source, ("devkit",))}
    assert found == {
        "json",
        "tests.support",
        "devkit.dagrun",
        "devkit",
        "bench.airflow_dispatch",
        "sys",
        "tests.support.late_writer",
    }


def test_the_triggers_ask_the_backend_and_import_no_driver() -> None:
    """Waiting is a backend capability (``AtomicStore.notifications()``): the code that
    waits knows no driver, so a new backend brings its listener without touching it."""
    assert _imports_of("airflow_atomic_store/triggers", ("psycopg", "sqlite3", "aiosqlite")) == []
