"""The "Atomic Store" page in a real browser, against the deployment's API server.

Headless Chromium (Debian's ``chromium`` and ``chromium-driver``, which ``make
e2e`` installs when missing) driven through Selenium does what a user does:
signs in on Airflow's own login page with the harness's user, picks the store
connection, opens the dispatcher's queue, types a stale threshold into the
page and applies it, then filters the rows. :func:`check_queue_page` runs
while the dispatchers drain the queue, right after the harness killed a task
that holds a claim, so the page has real pending, in-flight and stale rows to
show. It checks what the user sees against the store:

* the page's counts are one consistent moment of the queue, between the
  store's counts read just before and just after it (``pending`` only falls
  and ``done`` only grows once the producer has finished);
* the killed task's row is listed as a stale claim, with the victim run as its
  ``claimedBy``, once the threshold is below its claim's age; with a one-hour
  threshold nothing is stale (the whole run is shorter);
* the queue-over-time charts are drawn (the last hour's 60 and the last day's 96
  bars, as inline SVG the browser lays out), and their figures are of the same
  moment: the backlog between the store's ``pending`` + ``in_flight`` before and
  after, the day's finished items between its finished rows (neither ``pending``
  nor ``in_flight``) before and after (the run is shorter than a day);
* a filter the spec layer refuses is shown as a message, with status 400.

It saves a screenshot of the queue page in the run's working directory, or where
``--screenshot`` says: ``make e2e E2E_ARGS="--screenshot docs/img/atomic-store-page.png"``
refreshes the one ``docs/observing.md`` shows (a plain run leaves the checkout as
it found it).
"""

from __future__ import annotations

import math
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow_atomic_store import AtomicStore
from e2e import checks

__all__ = ["PageFigures", "chart_between", "check_queue_page", "figures_between"]

PROJECT = Path(__file__).resolve().parent.parent
CONN_ID = "atomic_store_default"  # the deployment's store connection (an environment variable)
WAIT_SECONDS = 90.0  # one page on a busy 2-core machine
WINDOW = (1280, 1000)


class BrowserMissing(checks.CheckFailed):
    """Chromium or its driver is not installed."""


@dataclass(frozen=True)
class PageFigures:
    """What the queue page showed."""

    rows: int
    statuses: dict[str, int]
    in_flight: int
    stale_count: int
    stale: dict[str, str]  # key -> claimed by, from the stale-claims table
    stale_runs: dict[str, int]  # claimed by -> stale claims, from the stale-by-run table
    #: The queue-over-time charts: the backlog now, the last day's finished items, and
    #: the bars each chart (``activity-hour``, ``activity-day``) shows with a size.
    backlog: int = 0
    day_finished: int = 0
    chart_bars: dict[str, int] | None = None

    @property
    def pending(self) -> int:
        return self.statuses.get("pending", 0)

    @property
    def done(self) -> int:
        return self.statuses.get("done", 0)


#: Bars each activity chart draws: a minute each for an hour, a quarter each for a day.
CHART_BARS = {"activity-hour": 60, "activity-day": 96}


def chart_between(page: PageFigures, before: Counter[str], after: Counter[str]) -> None:
    """Raise unless the charts are drawn and show the moment the counts show."""
    if page.chart_bars != CHART_BARS:
        raise checks.CheckFailed(
            f"the activity charts drew {page.chart_bars} bars, not {CHART_BARS}"
        )
    queued = [counts["pending"] + counts["in_flight"] for counts in (before, after)]
    if not queued[1] <= page.backlog <= queued[0]:
        raise checks.CheckFailed(
            f"the chart's backlog is {page.backlog}; the store had {queued[0]} queued "
            f"before and {queued[1]} after"
        )
    ended = [
        sum(counts.values()) - count for counts, count in zip((before, after), queued, strict=True)
    ]
    if not ended[0] <= page.day_finished <= ended[1]:
        raise checks.CheckFailed(
            f"the chart shows {page.day_finished} finished in the last day; the store had "
            f"{ended[0]} finished before and {ended[1]} after"
        )


def figures_between(page: PageFigures, before: Counter[str], after: Counter[str]) -> None:
    """Raise unless ``page`` is one moment of a draining queue between ``before`` and ``after``.

    Once every item is enqueued, rows only move ``pending`` -> ``in_flight`` ->
    ``done`` (a recovery re-claims an in-flight row: it stays in flight).
    """
    total = sum(before.values())
    if sum(after.values()) != total or page.rows != total:
        raise checks.CheckFailed(
            f"the page shows {page.rows} rows; the store held {total} before, "
            f"{sum(after.values())} after"
        )
    if not after["pending"] <= page.pending <= before["pending"]:
        raise checks.CheckFailed(
            f"the page shows {page.pending} pending; the store had {before['pending']} "
            f"before and {after['pending']} after"
        )
    if not before["done"] <= page.done <= after["done"]:
        raise checks.CheckFailed(
            f"the page shows {page.done} done; the store had {before['done']} before "
            f"and {after['done']} after"
        )
    if page.statuses.get("in_flight", 0) != page.in_flight or (
        sum(page.statuses.values()) != page.rows
    ):
        raise checks.CheckFailed(f"the page's counts do not add up: {page}")


def _chromium() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        raise BrowserMissing(
            "headless Chromium is needed: `make e2e` installs Debian's chromium and "
            "chromium-driver packages (apt-get install chromium chromium-driver)"
        )
    return browser, driver


@contextmanager
def chromium(profile: Path) -> Iterator[Any]:
    """A headless Chromium session, always ended (with its driver) on the way out."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(argument)
    session = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        session.set_page_load_timeout(WAIT_SECONDS)
        yield session
    finally:
        session.quit()


class Page:
    """The signed-in browser on the API server at ``base_url``."""

    def __init__(self, session: Any, base_url: str) -> None:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions
        from selenium.webdriver.support.ui import WebDriverWait

        self.session, self.base_url = session, base_url.rstrip("/")
        self._by, self._until = By, expected_conditions
        self._wait = WebDriverWait(session, WAIT_SECONDS)

    def element(self, element_id: str) -> Any:
        return self._wait.until(self._until.presence_of_element_located((self._by.ID, element_id)))

    def has(self, element_id: str) -> bool:
        return bool(self.session.find_elements(self._by.ID, element_id))

    def text(self, element_id: str) -> str:
        return str(self.element(element_id).text).strip()

    def sign_in(self, username: str, password: str) -> None:
        """Airflow's own login page, then back to the store page (the ``next`` URL)."""
        self.session.get(f"{self.base_url}/auth/login?next=/atomic-store/")
        by_name = (self._by.NAME, "username")
        self._wait.until(self._until.presence_of_element_located(by_name)).send_keys(username)
        self.session.find_element(self._by.NAME, "password").send_keys(password)
        self.session.find_element(self._by.CSS_SELECTOR, "button[type=submit]").click()
        self.element("connections")

    def click(self, link_text: str, then: str) -> None:
        self.session.find_element(self._by.LINK_TEXT, link_text).click()
        self.element(then)

    def apply_threshold(self, seconds: int) -> None:
        box = self.element("stale-after")
        box.clear()
        box.send_keys(str(seconds))
        self.session.find_element(self._by.ID, "apply-threshold").click()
        self._wait.until(
            lambda _: (
                f"stale_after={seconds}" in self.session.current_url
                and self.session.find_elements(self._by.ID, "stale-count")
            )
        )

    def figures(self) -> PageFigures:
        statuses = {}
        for row in self.element("status-counts").find_elements(self._by.CSS_SELECTOR, "tr"):
            cells = [cell.text.strip() for cell in row.find_elements(self._by.TAG_NAME, "td")]
            if len(cells) == 2:
                statuses[cells[0]] = int(cells[1])
        stale = {}
        for row in self.session.find_elements(self._by.CSS_SELECTOR, "#stale-claims tr[data-key]"):
            cells = [cell.text.strip() for cell in row.find_elements(self._by.TAG_NAME, "td")]
            stale[row.get_attribute("data-key")] = cells[1]
        runs = {}
        for row in self.session.find_elements(
            self._by.CSS_SELECTOR, "#stale-by-run tr[data-claimed-by]"
        ):
            cells = [cell.text.strip() for cell in row.find_elements(self._by.TAG_NAME, "td")]
            runs[row.get_attribute("data-claimed-by")] = int(cells[1])
        bars = {}
        for chart in CHART_BARS:
            drawn = self.element(chart).find_elements(self._by.CSS_SELECTOR, "rect.finished")
            # Laid out by the browser: a bar has a width on screen (an empty one no height).
            bars[chart] = sum(1 for bar in drawn if bar.rect["width"] > 0)
        return PageFigures(
            rows=int(self.text("rows")),
            statuses=statuses,
            in_flight=int(self.text("in-flight-count")),
            stale_count=int(self.text("stale-count")),
            stale=stale,
            stale_runs=runs,
            backlog=int(self.text("activity-hour-backlog")),
            day_finished=int(self.text("activity-day-finished")),
            chart_bars=bars,
        )

    def filter_rows(self, where: str) -> None:
        box = self.element("where")
        box.clear()
        box.send_keys(where)
        self.session.find_element(self._by.ID, "filter").click()
        self._wait.until(lambda _: "where=" in self.session.current_url)


def _claim_age(store: AtomicStore, table: str, key: str) -> float:
    value = store.get(table, key) or {}
    if value.get("status") != "in_flight":
        raise checks.CheckFailed(f"{key} is no longer in flight ({value}): no stale claim to show")
    claimed = datetime.fromisoformat(str(value["claimedAt"]).replace("Z", "+00:00"))
    return (datetime.now(timezone.utc) - claimed).total_seconds()


def _shown(path: Path) -> str:
    """The path as the summary prints it: relative to the project where it is inside it."""
    return str(path.relative_to(PROJECT)) if path.is_relative_to(PROJECT) else str(path)


def check_queue_page(
    *,
    base_url: str,
    username: str,
    password: str,
    store: AtomicStore,
    table: str,
    stale_key: str,
    claimed_by: str,
    work_dir: Path,
    say: Callable[[str], None],
    screenshot: Path | None = None,
    conn_id: str = CONN_ID,
) -> dict[str, str]:
    """Sign in, read the queue page and check it (see the module docstring); the summary line."""
    started = time.monotonic()
    while (age := _claim_age(store, table, stale_key)) < 3:  # a threshold below its age
        time.sleep(0.5)
    threshold = max(2, math.floor(age) - 1)
    with chromium(work_dir / "chromium-profile") as session:
        page = Page(session, base_url)
        page.sign_in(username, password)
        page.click(conn_id, then="tables")
        page.click(table, then="pending-count")
        before = checks.status_counts(checks.read_table(store, table))
        page.apply_threshold(threshold)
        shown = page.figures()
        after = checks.status_counts(checks.read_table(store, table))
        figures_between(shown, before, after)
        chart_between(shown, before, after)
        if shown.stale.get(stale_key) != claimed_by or not shown.stale_runs.get(claimed_by):
            raise checks.CheckFailed(
                f"with a {threshold} s threshold the page lists stale claims {shown.stale}, "
                f"not {stale_key} claimed by {claimed_by}"
            )
        screenshot = screenshot or work_dir / "atomic-store-page.png"
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        session.save_screenshot(str(screenshot))

        page.apply_threshold(3600)
        if page.text("stale-count") != "0" or not page.has("no-stale"):
            raise checks.CheckFailed("with a one-hour threshold the page still flags stale claims")

        page.click("rows", then="where")
        page.filter_rows('[{"field": "status", "operator": "resembles", "value": "x"}]')
        message = page.text("error")
        if "operator" not in message:
            raise checks.CheckFailed(f"a bad filter showed {message!r}, not what is wrong with it")
    seconds = time.monotonic() - started
    say(
        f"browser: the page showed {shown.pending} pending, {shown.in_flight} in flight, "
        f"{shown.done} done; {stale_key} flagged stale at {threshold} s ({seconds:.0f}s)"
    )
    return {
        "browser": (
            f"signed in, queue page showed {shown.pending} pending / {shown.in_flight} in flight "
            f"/ {shown.done} done (store {before['pending']}/{before['in_flight']}/"
            f"{before['done']} before, {after['pending']}/{after['in_flight']}/{after['done']} "
            f"after); charts drawn, backlog {shown.backlog}, {shown.day_finished} finished "
            f"today; {stale_key} flagged stale at a {threshold} s threshold, nothing at 1 h; "
            f"a bad filter refused; screenshot {_shown(screenshot)} ({seconds:.0f}s)"
        )
    }
