"""MkDocs hook: include a tested example DAG's marked block in a page.

A page writes ``<!-- example: example_dags/token_bucket.py seed_bucket -->`` and
gets the lines between ``# [START seed_bucket]`` and ``# [END seed_bucket]`` of
that file as a Python code block, so the docs show exactly the code the tests
run. A missing file or marker fails the build (mkdocs runs with ``strict``).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
_DIRECTIVE = re.compile(r"^<!-- example: (?P<path>\S+) (?P<name>\S+) -->$", re.MULTILINE)


class ExampleNotFound(Exception):
    """A page asked for a file or marker that does not exist."""


def extract(path: str, name: str) -> str:
    source = ROOT / path
    if not source.is_file():
        raise ExampleNotFound(f"example file {path!r} does not exist")
    text = source.read_text(encoding="utf-8")
    pattern = re.compile(
        rf"^[ \t]*# \[START {re.escape(name)}\]\n(?P<body>.*?)^[ \t]*# \[END {re.escape(name)}\]",
        re.MULTILINE | re.DOTALL,
    )
    match = pattern.search(text)
    if match is None:
        raise ExampleNotFound(f"{path} has no '# [START {name}]' … '# [END {name}]' block")
    return textwrap.dedent(match.group("body")).rstrip()


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    def replace(match: re.Match[str]) -> str:
        code = extract(match.group("path"), match.group("name"))
        return f'```python title="{match.group("path")}"\n{code}\n```'

    return _DIRECTIVE.sub(replace, markdown)
