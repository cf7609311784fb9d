"""Markdown building blocks shared by the scenario sections."""

from __future__ import annotations


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """A GitHub-flavoured Markdown table; numeric-looking columns are right-aligned."""
    align = ["---:" if _numeric(rows, i) else "---" for i in range(len(headers))]
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def _numeric(rows: list[list[str]], column: int) -> bool:
    cells = [row[column] for row in rows if column < len(row)]
    return bool(cells) and all(cell[:1].isdigit() or cell[:1] in "--" for cell in cells)


def ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "-"
