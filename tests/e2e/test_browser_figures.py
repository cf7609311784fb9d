"""The browser test's reading of the queue page, on hand-made figures (the run is ``make e2e``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from e2e.browser import CHART_BARS, PageFigures, chart_between, figures_between
from e2e.checks import CheckFailed

BEFORE = Counter({"pending": 300, "in_flight": 60, "done": 140})
AFTER = Counter({"pending": 280, "in_flight": 55, "done": 165})


def shown(pending: int, in_flight: int, done: int, rows: int = 500) -> PageFigures:
    statuses = {"pending": pending, "in_flight": in_flight, "done": done}
    return PageFigures(
        rows, statuses, in_flight, stale_count=1, stale={"op-1": "d/r"}, stale_runs={"d/r": 1}
    )


@pytest.mark.parametrize("figures", [(300, 60, 140), (280, 55, 165), (290, 60, 150)])
def test_a_moment_between_the_stores_readings_passes(figures: tuple[int, int, int]) -> None:
    figures_between(shown(*figures), BEFORE, AFTER)


@pytest.mark.parametrize(
    ("figures", "problem"),
    [
        ((301, 59, 140), "301 pending"),
        ((290, 71, 139), "139 done"),
        ((280, 54, 166), "166 done"),
        ((290, 60, 149), "do not add up"),
    ],
)
def test_counts_the_store_never_had_fail(figures: tuple[int, int, int], problem: str) -> None:
    with pytest.raises(CheckFailed, match=problem):
        figures_between(shown(*figures), BEFORE, AFTER)


def test_other_statuses_count_towards_the_rows() -> None:
    page = PageFigures(
        500, {"pending": 290, "in_flight": 58, "done": 150, "failed": 2}, 58, 0, {}, {}
    )
    figures_between(page, BEFORE, AFTER)


def test_a_row_count_other_than_the_stores_fails() -> None:
    with pytest.raises(CheckFailed, match="shows 499 rows"):
        figures_between(shown(300, 59, 140, rows=499), BEFORE, AFTER)


def test_an_in_flight_figure_that_disagrees_with_the_status_table_fails() -> None:
    page = PageFigures(500, {"pending": 290, "in_flight": 60, "done": 150}, 61, 0, {}, {})
    with pytest.raises(CheckFailed, match="do not add up"):
        figures_between(page, BEFORE, AFTER)


def charted(backlog: int, day_finished: int, bars: dict[str, int] = CHART_BARS) -> PageFigures:
    return replace(
        shown(290, 58, 150), backlog=backlog, day_finished=day_finished, chart_bars=dict(bars)
    )


@pytest.mark.parametrize(("backlog", "finished"), [(360, 140), (335, 165), (348, 150)])
def test_charts_of_a_moment_between_the_stores_readings_pass(backlog: int, finished: int) -> None:
    chart_between(charted(backlog, finished), BEFORE, AFTER)


@pytest.mark.parametrize(
    ("page", "problem"),
    [
        (charted(361, 150), "backlog is 361"),
        (charted(334, 150), "backlog is 334"),
        (charted(348, 139), "139 finished"),
        (charted(348, 166), "166 finished"),
        (charted(348, 150, {"activity-hour": 60, "activity-day": 0}), "bars"),
        (replace(shown(290, 58, 150), backlog=348, day_finished=150), "bars"),
    ],
)
def test_charts_not_drawn_or_of_another_moment_fail(page: PageFigures, problem: str) -> None:
    with pytest.raises(CheckFailed, match=problem):
        chart_between(page, BEFORE, AFTER)
