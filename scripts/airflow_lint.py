"""Airflow's own lint rules (ruff's ``AIR``, preview) over what a DAG author reads or runs.

``make lint`` and the pre-commit hook run this: the package, the example DAGs and the
Python blocks of README.md and docs/. Ruff reads no Markdown, so each ```` ```python ````
block is written out as ``<page>_<line>.py`` in a temporary folder first
(``docs/reference/hook.md`` line 40 -> ``docs_reference_hook_md_40.py``). A block that is
not Python (a signature sketch such as ``store.get(table, key) -> …``) is named and
left out. The exit code is ruff's.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
CHECKED = ("airflow_atomic_store", "example_dags")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def write_blocks(folder: Path) -> int:
    written = 0
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for found in BLOCK.finditer(text):
            line = text.count("\n", 0, found.start()) + 1
            where = f"{page.relative_to(ROOT)}:{line}"
            try:
                ast.parse(found.group(1))
            except SyntaxError:
                print(f"not Python, not linted: {where}")
                continue
            name = re.sub(r"[^A-Za-z0-9]+", "_", str(page.relative_to(ROOT)))
            (folder / f"{name}_{line}.py").write_text(found.group(1), encoding="utf-8")
            written += 1
    return written


def main() -> int:
    ruff = Path(sys.executable).with_name("ruff")
    with tempfile.TemporaryDirectory(prefix="docs-code-") as folder:
        print(f"{write_blocks(Path(folder))} Python blocks of the docs")
        command = [str(ruff), "check", "--select", "AIR", "--preview", "--no-cache"]
        return subprocess.run([*command, *CHECKED, folder], cwd=ROOT, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
