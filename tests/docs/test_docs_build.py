"""The documentation builds strictly (no broken link, no missing example block) and offline."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Attributes through which a page loads something while it is shown (links are not loads).
_LOADING = {("script", "src"), ("img", "src"), ("iframe", "src"), ("source", "src")}
_LOADING_LINKS = {"stylesheet", "preconnect", "preload", "modulepreload", "icon", "manifest"}
_CSS_URL = re.compile(r"""(?:@import\s+|url\()\s*['"]?(https?:)?//""", re.IGNORECASE)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site_dir = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return site_dir


def test_docs_build_strictly(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "installation" / "index.html").is_file()
    assert (site / "changelog" / "index.html").is_file()


class _Loads(HTMLParser):
    """What a page loads from outside the site, and whether it asks for Mermaid."""

    def __init__(self) -> None:
        super().__init__()
        self.external: list[str] = []
        self.mermaid = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        urls = [values.get(attr, "") for t, attr in _LOADING if t == tag]
        if tag == "link" and _LOADING_LINKS & set(values.get("rel", "").lower().split()):
            urls.append(values.get("href", ""))
        self.external += [url for url in urls if re.match(r"(https?:)?//", url)]
        # material fetches mermaid.js from a CDN for any element of class "mermaid".
        self.mermaid |= "mermaid" in values.get("class", "").split()


def test_the_site_loads_nothing_from_outside_itself(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    for page in pages:
        loads = _Loads()
        loads.feed(page.read_text(encoding="utf-8"))
        name = page.relative_to(site).as_posix()
        assert loads.external == [], f"{name} loads {loads.external}"
        assert not loads.mermaid, f"{name} has a Mermaid diagram (needs mermaid.js from a CDN)"
    for stylesheet in site.rglob("*.css"):
        assert not _CSS_URL.search(stylesheet.read_text(encoding="utf-8")), stylesheet.name


def test_the_changelog_page_is_the_changelog(site: Path) -> None:
    page = (site / "changelog" / "index.html").read_text(encoding="utf-8")
    first_release = re.search(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert first_release is not None
    assert first_release.group(1) in page


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
