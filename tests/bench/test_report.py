"""``docs/benchmarks.md`` is the saved run rendered: its targets, what remains, its tables.

The run-by-run history lives in ``bench/analysis.md``, off the docs site; the hand-kept
summary ``bench/remains.md`` names the run it was written for, and a page of any other
run says so rather than showing new numbers under old prose.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import report

ROOT = Path(__file__).resolve().parents[2]
SAVED_RUN = ROOT / "bench" / "results" / "full.json"
WARNING = '!!! warning "Written for another run"'


def _saved_run() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SAVED_RUN.read_text())
    return data


def test_the_page_is_the_saved_run_rendered_without_measuring() -> None:
    page = report.render(_saved_run(), plot_name="benchmarks.png")
    assert page == (ROOT / "docs" / "benchmarks.md").read_text()


def test_the_page_leads_with_targets_then_what_remains_and_keeps_no_run_history() -> None:
    page = report.render(_saved_run(), plot_name="benchmarks.png")
    headings = [line for line in page.splitlines() if line.startswith("## ")]
    assert headings[:3] == ["## Targets", "## What remains", "## Machine"]
    assert WARNING not in page  # bench/remains.md was written for this run
    assert "Round 1" not in page and "twelfth run:" not in page
    assert "Round 1" in (ROOT / "bench" / "analysis.md").read_text()


def test_a_summary_written_for_another_run_is_shown_behind_a_warning(tmp_path: Path) -> None:
    remains = tmp_path / "remains.md"
    remains.write_text(
        "<!-- written for the run of 2026-01-01 00:00 UTC -->\n## What remains\n\nOld prose.\n"
    )
    page = report.render(_saved_run(), plot_name=None, remains=remains)
    summary = page[page.index("## What remains") : page.index("## Machine")]
    assert WARNING in summary
    assert "2026-01-01 00:00 UTC" in summary and "2026-12-03 14:57 UTC" in summary
    assert summary.index(WARNING) < summary.index("Old prose.")
    assert "<!-- written for" not in page


def test_a_summary_that_names_no_run_is_shown_behind_a_warning(tmp_path: Path) -> None:
    remains = tmp_path / "remains.md"
    remains.write_text("## What remains\n\nUndated prose.\n")
    page = report.render(_saved_run(), plot_name=None, remains=remains)
    assert WARNING in page and "no named run" in page
