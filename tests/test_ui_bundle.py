"""The committed UI bundle matches its sources, without Node (``make ui`` rebuilds it).

``make ui`` (``npm ci && npm run build`` in ``airflow_atomic_store/ui/www``) writes
the bundle and, next to it, ``atomic-store.sha256``: the hash of the sources it was
built from and of the bundle itself (``www/scripts/record-sources.mjs``). This test
computes both the same way in Python, so changing a source without rebuilding, or
editing the built file by hand, fails ``make test`` on a machine with no Node at all.
That the build is reproducible (the same bundle from ``npm ci`` on a clean checkout)
is ``make ui-test``'s, which CI runs.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

UI = Path(__file__).resolve().parents[1] / "airflow_atomic_store" / "ui"
WWW, STATIC = UI / "www", UI / "static"
#: What the build reads besides ``src/`` (as record-sources.mjs lists them).
ROOT_FILES = ("package.json", "package-lock.json", "tsconfig.json", "vite.config.ts")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sources_hash(www: Path = WWW) -> str:
    """sha256 of ``sha256sum``-style lines (digest, two spaces, path) sorted by path."""
    paths = [www / name for name in ROOT_FILES] + [
        path
        for path in (www / "src").rglob("*")
        if path.is_file() and not re.search(r"\.test\.tsx?$", path.name)
    ]
    lines = sorted((path.relative_to(www).as_posix(), _sha256(path.read_bytes())) for path in paths)
    return _sha256("".join(f"{digest}  {name}\n" for name, digest in lines).encode())


def _recorded() -> dict[str, str]:
    text = (STATIC / "atomic-store.sha256").read_text()
    return dict(line.split(" ", 1) for line in text.splitlines())


def test_the_committed_bundle_was_built_from_the_sources_as_they_are() -> None:
    assert _recorded()["sources"] == sources_hash(), (
        "the UI sources changed since the bundle was built: run `make ui` and commit "
        "airflow_atomic_store/ui/static/"
    )


def test_the_committed_bundle_is_the_one_the_build_wrote() -> None:
    bundle = (STATIC / "atomic-store.js").read_bytes()
    assert _recorded()["bundle"] == _sha256(bundle), (
        "airflow_atomic_store/ui/static/atomic-store.js differs from what `make ui` wrote"
    )


def test_the_bundle_is_the_component_airflow_loads_with_react_from_the_host() -> None:
    # A UMD file whose global is the component; React and its JSX runtime are the host's.
    bundle = (STATIC / "atomic-store.js").read_text()
    assert "e.AirflowPlugin=" in bundle.replace(" ", "")
    assert "e.React" in bundle and "e.ReactJSXRuntime" in bundle
    assert "react-dom" not in bundle  # not bundled a second copy of React


def test_a_changed_source_changes_the_hash_and_a_changed_test_does_not(tmp_path: Path) -> None:
    # The check has teeth: the same computation over a copy, one character changed.
    copy = tmp_path / "www"
    shutil.copytree(WWW, copy, ignore=shutil.ignore_patterns("node_modules"))
    before = sources_hash()
    assert sources_hash(copy) == before
    test = copy / "src" / "api.test.ts"
    test.write_text(test.read_text() + "\n// tests are not in the bundle\n")
    assert sources_hash(copy) == before
    page = copy / "src" / "StorePage.tsx"
    page.write_text(page.read_text().replace("Atomic Store", "Atomic  Store", 1))
    assert sources_hash(copy) != before
