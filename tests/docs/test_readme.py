"""The README's DAG example is the tested example DAG's code, not a copy that can drift."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_dag_example_is_the_process_event_once_example_dag() -> None:
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        import include_example
    finally:
        sys.path.pop(0)
    tested = include_example.extract("example_dags/process_event_once.py", "process_event_once")
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    shown = [block for block in blocks if "first_delivery = AtomicUpsertOperator(" in block]

    # ruff formats the README's block as a module: two blank lines between functions.
    assert [_squeeze_blank_lines(block) for block in shown] == [_squeeze_blank_lines(tested)]


def _squeeze_blank_lines(code: str) -> str:
    return re.sub(r"\n{3,}", "\n\n", code.strip())
