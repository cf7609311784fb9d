"""Write the docs' Python code blocks out as files, so that linters check them too.

``make lint`` runs Airflow's own ruff rules (``--select AIR --preview``) over the
package, the example DAGs and the code the docs show; ruff reads no Markdown, so each
```` ```python ```` block of README.md and docs/ becomes ``<page>_<line>.py`` in the
given folder (``docs/reference/hook.md`` line 40 -> ``docs_reference_hook_md_40.py``).
A block that is not Python (a signature sketch such as ``store.get(table, key) -> …``)
is named on the output and left out.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def write_blocks(folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for found in BLOCK.finditer(text):
            line = text.count("\n", 0, found.start()) + 1
            name = re.sub(r"[^A-Za-z0-9]+", "_", str(page.relative_to(ROOT)))
            try:
                ast.parse(found.group(1))
            except SyntaxError:
                print(f"not Python, not linted: {page.relative_to(ROOT)}:{line}")
                continue
            (folder / f"{name}_{line}.py").write_text(found.group(1), encoding="utf-8")
            written += 1
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/docs_code.py FOLDER")
    print(f"{write_blocks(Path(sys.argv[1]))} code blocks of the docs in {sys.argv[1]}")
