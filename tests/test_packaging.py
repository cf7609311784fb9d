"""The sdist and the wheel install like a provider: license, types, changelog, examples, metadata.

Both are built once per session with ``python -m build --no-isolation`` (the test
extra installs build, twine and setuptools) from a copy of the files the build
reads, so nothing is written into the repository; the wheel is built from the sdist,
as an installer building from source would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import Parser
from importlib.metadata import metadata as installed_metadata
from pathlib import Path

import pytest

import airflow_atomic_store

ROOT = Path(__file__).resolve().parents[1]
VERSION = airflow_atomic_store.__version__  # pyproject's, through the installed metadata
STEM = f"airflow_atomic_store-{VERSION}"
# What the build reads; a file the build needs and that is missing here fails the build.
BUILD_INPUTS = [
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "CHANGELOG.md",
    "MANIFEST.in",
    "airflow_atomic_store",
    "example_dags",
]
# Beside the package in the checkout but never shipped: the build sees them and leaves them out.
DEVELOPMENT_ONLY = ["devkit", "tests", "bench", "e2e", "scripts"]
REQUIRED_CLASSIFIERS = {
    "Framework :: Apache Airflow",
    "Framework :: Apache Airflow :: Provider",
    "Programming Language :: Python :: 3.10",
    "Programming Language :: Python :: 3.11",
    "Typing :: Typed",
}


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)  # type: ignore[call-overload]
    assert completed.returncode == 0, f"{cmd}\n{completed.stdout}\n{completed.stderr}"
    return completed


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.py[cod]", "*.egg-info", "node_modules")
    for name in [*BUILD_INPUTS, *DEVELOPMENT_ONLY]:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("dist")
    built = _run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)]
    )
    out.with_suffix(".log").write_text(built.stdout + built.stderr)
    return out


def test_the_build_warns_about_no_package_missing_from_the_list(dist: Path) -> None:
    """setuptools warned that ``airflow_atomic_store.ui.templates`` was absent from
    ``packages`` (a data folder it takes for a namespace package)."""
    log = dist.with_suffix(".log").read_text()
    assert "is absent from the `packages` configuration" not in log
    assert "ui.templates" not in log


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    return dist / f"{STEM}-py3-none-any.whl"


@pytest.fixture(scope="module")
def sdist(dist: Path) -> Path:
    return dist / f"{STEM}.tar.gz"


@pytest.fixture(scope="module")
def wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


@pytest.fixture(scope="module")
def sdist_files(sdist: Path) -> set[str]:
    with tarfile.open(sdist) as archive:
        return {name.removeprefix(f"{STEM}/") for name in archive.getnames()}


@pytest.fixture(scope="module")
def metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        return Parser().parsestr(archive.read(f"{STEM}.dist-info/METADATA").decode())


def test_the_build_makes_exactly_one_sdist_and_one_wheel(dist: Path) -> None:
    assert sorted(path.name for path in dist.iterdir()) == [
        f"{STEM}-py3-none-any.whl",
        f"{STEM}.tar.gz",
    ]


def test_twine_check_passes_on_both_strictly(wheel: Path, sdist: Path) -> None:
    _run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)])


def test_the_wheel_ships_the_license_and_the_typing_marker(wheel_files: set[str]) -> None:
    assert f"{STEM}.dist-info/licenses/LICENSE" in wheel_files
    assert "airflow_atomic_store/py.typed" in wheel_files


def test_the_wheel_ships_every_module_and_data_file_of_the_package(
    wheel_files: set[str],
) -> None:
    package = ROOT / "airflow_atomic_store"
    sources = {
        path.relative_to(ROOT).as_posix()
        for pattern in ("*.py", "*.sql")
        for path in package.rglob(pattern)
        if "__pycache__" not in path.parts
    }
    missing = sources - wheel_files
    assert not missing, (
        f"not in the wheel (a subpackage missing from pyproject's packages?): {missing}"
    )


def test_the_wheel_ships_the_ui_bundle_and_its_hash_but_not_its_sources(
    wheel_files: set[str],
) -> None:
    static = "airflow_atomic_store/ui/static/"
    assert {f"{static}atomic-store.js", f"{static}atomic-store.sha256"} <= wheel_files
    assert not [name for name in wheel_files if "/ui/www/" in name or "node_modules" in name]


def test_the_wheel_ships_the_example_dags_inside_the_package(wheel_files: set[str]) -> None:
    examples = sorted(path.name for path in (ROOT / "example_dags").glob("*.py"))
    assert "process_event_once.py" in examples
    shipped = {
        name.removeprefix("airflow_atomic_store/example_dags/")
        for name in wheel_files
        if name.startswith("airflow_atomic_store/example_dags/")
    }
    assert shipped == {*examples, ".airflowignore"}
    assert not any(name.startswith("example_dags/") for name in wheel_files)


def test_the_wheel_leaves_out_the_development_harness_tests_and_tools(
    wheel_files: set[str],
) -> None:
    assert (ROOT / "devkit" / "postgres_server.py").exists()  # the build saw it
    top_level = {name.split("/", 1)[0] for name in wheel_files}
    assert top_level == {"airflow_atomic_store", f"{STEM}.dist-info"}


def test_the_wheel_registers_the_provider_entry_point(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        entry_points = archive.read(f"{STEM}.dist-info/entry_points.txt").decode()
    assert "[apache_airflow_provider]" in entry_points
    assert "airflow_atomic_store.get_provider_info:get_provider_info" in entry_points


def test_the_sdist_ships_license_changelog_and_the_example_dags(sdist_files: set[str]) -> None:
    for name in ("LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "PKG-INFO"):
        assert name in sdist_files
    assert "airflow_atomic_store/py.typed" in sdist_files
    assert "example_dags/process_event_once.py" in sdist_files
    assert "example_dags/.airflowignore" in sdist_files
    assert not any("__pycache__" in name for name in sdist_files)


def test_the_metadata_declares_a_provider_with_its_urls(metadata: Message) -> None:
    assert metadata["Name"] == "airflow-atomic-store"
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["Requires-Python"] == ">=3.10"
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert set(metadata.get_all("Classifier", [])) >= REQUIRED_CLASSIFIERS
    assert any(c.startswith("Development Status :: ") for c in metadata.get_all("Classifier", []))
    assert "airflow" in metadata["Keywords"].split(",")
    urls = dict(entry.split(", ", 1) for entry in metadata.get_all("Project-URL", []))
    assert {"Documentation", "Changelog", "Source"} <= set(urls)
    assert all(url.startswith("https://") for url in urls.values())


def test_the_developer_tools_are_dependency_groups_never_in_the_wheel_metadata(
    metadata: Message,
) -> None:
    """``Provides-Extra: test`` told every user about the project's test tools; PEP 735
    groups stay in pyproject.toml, which the wheel does not carry."""
    import tomllib

    assert metadata.get_all("Provides-Extra", []) == []
    requires = metadata.get_all("Requires-Dist", [])
    names = {re.split(r"[\s\[<>=!~;(]", entry, maxsplit=1)[0].lower() for entry in requires}
    assert {"apache-airflow", "apache-airflow-providers-common-compat", "psycopg"} <= names
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]
    assert set(groups) == {"test", "lint", "docs", "e2e", "bench"}
    for group, members in groups.items():
        tools = {re.split(r"[\s\[<>=!~;(]", m, maxsplit=1)[0].lower() for m in members}
        assert not tools & names, f"a plain install pulls part of the {group} group"
    assert {"ruff>=0.17", "mypy>=1.10", "pre-commit>=3.5"} <= set(groups["lint"])


def test_the_urls_point_at_the_release_not_the_moving_main_branch(metadata: Message) -> None:
    urls = dict(entry.split(", ", 1) for entry in metadata.get_all("Project-URL", []))
    for name in ("Documentation", "Changelog"):
        assert f"/v{VERSION}/" in urls[name] and "/main/" not in urls[name], urls[name]


def test_the_postgres_provider_floor_is_the_one_the_hook_needs(metadata: Message) -> None:
    """pip must refuse what compat refuses: providers before 6.8.0 lack ``_create_connection``."""
    from airflow_atomic_store.compat import MIN_POSTGRES_PROVIDER_VERSION

    declared = [
        entry.replace(" ", "")
        for entry in metadata.get_all("Requires-Dist", [])
        if re.match(r"apache-airflow-providers-postgres\b", entry)
    ]
    assert declared == [f"apache-airflow-providers-postgres>={MIN_POSTGRES_PROVIDER_VERSION}"]


def test_one_version_from_pyproject_to_metadata_and_the_package(metadata: Message) -> None:
    declared = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert declared is not None
    assert metadata["Version"] == declared.group(1) == airflow_atomic_store.__version__
    restated = [
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "airflow_atomic_store").rglob("*.py")
        if f'"{metadata["Version"]}"' in path.read_text()
    ]
    assert restated == [], "the version is pyproject's alone"


def test_the_readme_links_are_absolute_so_they_work_on_a_package_index_page() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", readme)
    assert links
    assert [link for link in links if not link.startswith("https://")] == []


def test_the_installed_wheel_lists_its_example_dags_and_version_in_the_provider_info(
    wheel: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)  # a pure wheel's files are its install layout
    # The two entries read from the installation, without the rest of get_provider_info
    # (its sqlite check imports Airflow, which takes seconds on a busy machine).
    probe = (
        "import importlib.util, json\n"
        "import airflow_atomic_store\n"
        "from airflow_atomic_store import get_provider_info as info\n"
        "examples = info._example_dags()\n"
        "print(json.dumps({'file': airflow_atomic_store.__file__, 'examples': examples,\n"
        "    'version': airflow_atomic_store.__version__,\n"
        "    'found': [importlib.util.find_spec(m).origin for m in examples]}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    shown = json.loads(_run([sys.executable, "-c", probe], cwd=tmp_path, env=env).stdout)
    assert Path(shown["file"]).is_relative_to(site)
    expected = sorted(
        f"airflow_atomic_store.example_dags.{path.stem}"
        for path in (ROOT / "example_dags").glob("[!_]*.py")
    )
    assert shown["examples"] == expected
    assert all(Path(origin).is_relative_to(site) for origin in shown["found"])
    assert shown["version"] == VERSION


def test_airflow_providers_get_full_shows_the_documentation_url() -> None:
    # AIRFLOW_HOME and the rest were set by tests/support/airflow_plugin.py.
    args = ["providers", "get", "airflow-atomic-store", "--full", "--output", "json"]
    shown = _run([sys.executable, "-m", "airflow", *args]).stdout
    (info,) = json.loads(shown[shown.index("[") :])
    urls = dict(
        u.split(", ", 1)
        for u in installed_metadata("airflow-atomic-store").get_all("Project-URL") or []
    )
    assert info["documentation-url"] == urls["Documentation"]
    assert info["documentation-url"].startswith("https://")


def test_the_integration_links_the_released_docs_and_how_to_guides() -> None:
    from airflow_atomic_store.get_provider_info import get_provider_info

    (integration,) = get_provider_info()["integrations"]
    links = [integration["external-doc-url"], *integration["how-to-guide"]]
    prefix = f"https://github.com/airflow-atomic-store/airflow-atomic-store/blob/v{VERSION}/docs/"
    for link in links:
        assert link.startswith(prefix), link
        assert (ROOT / "docs" / link.removeprefix(prefix)).is_file(), link
