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

:func:`check_native_pages` then checks what Airflow 3.1+'s own UI renders from the
plugin's ``react_apps``: the store page in the UI's document (no iframe), its counts
between the store's readings and its charts, its colours in the dark mode; the tab
of the victim run's claim task, listing exactly the rows its claim took in the
states the store gives them; an anonymous browser (401 from the tab's route, sent to
the login by the UI) and the deployment's ``viewer`` (refused, no row shown). It
saves both pages' screenshots, light and dark, next to the queue page's.
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

__all__ = [
    "DispatcherTask",
    "PageFigures",
    "chart_between",
    "check_native_pages",
    "check_queue_page",
    "figures_between",
]

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

    def sign_in(
        self,
        username: str,
        password: str,
        next_path: str = "/atomic-store/",
        then: str = "connections",
    ) -> None:
        """Airflow's own login page, then on to ``next_path`` (the store page), until ``then``."""
        self.session.get(f"{self.base_url}/auth/login?next={next_path}")
        by_name = (self._by.NAME, "username")
        self._wait.until(self._until.presence_of_element_located(by_name)).send_keys(username)
        self.session.find_element(self._by.NAME, "password").send_keys(password)
        self.session.find_element(self._by.CSS_SELECTOR, "button[type=submit]").click()
        self.element(then)

    def open(self, path: str, then: str) -> None:
        self.session.get(f"{self.base_url}/{path}")
        self.element(then)

    def press(self, label: str, then: str) -> None:
        """Click the native page's button labelled ``label`` (a connection, a table)."""
        xpath = f"//*[@id='atomic-store']//button[normalize-space()='{label}']"
        self._wait.until(self._until.element_to_be_clickable((self._by.XPATH, xpath))).click()
        self.element(then)

    def wait_for(self, css: str, count: int) -> list[Any]:
        """Wait until ``count`` elements match ``css`` (at least one when ``count`` is 0)."""

        def found(_: Any) -> Any:
            matched = self.session.find_elements(self._by.CSS_SELECTOR, css)
            return matched if (len(matched) >= count and matched) else False

        return list(self._wait.until(found))

    def dark(self, on: bool) -> None:
        """Airflow's colour mode, as its toggle stores it (next-themes' ``theme`` key)."""
        self.session.execute_script(
            "localStorage.setItem('theme', arguments[0])", "dark" if on else "light"
        )
        self.session.refresh()

    def scroll_to(self, element_id: str) -> None:
        self.session.execute_script(
            "document.getElementById(arguments[0]).scrollIntoView()", element_id
        )

    def colour_of(self, element_id: str) -> str:
        return str(
            self.session.execute_script(
                "return getComputedStyle(document.getElementById(arguments[0])).color", element_id
            )
        )

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


# -- the native page and the task-instance tab (Airflow 3.1+ react_apps) ----------------------

#: Where Airflow's UI renders the plugin's react apps (``ui/plugin.py``'s url_routes).
NAV_PAGE = "plugin/atomic-store"
TAB = "plugin/atomic-store-task"


@dataclass(frozen=True)
class DispatcherTask:
    """A dispatcher's claim task instance, and the keys its claim returned (its XCom)."""

    dag_id: str
    run_id: str
    task_id: str
    claimed: tuple[str, ...]

    @property
    def execution_id(self) -> str:
        return f"{self.dag_id}/{self.run_id}"

    @property
    def tab_path(self) -> str:
        return f"dags/{self.dag_id}/runs/{self.run_id}/tasks/{self.task_id}/{TAB}"


def _row_states(store: AtomicStore, table: str, task: DispatcherTask) -> dict[str, str]:
    """Each claimed row's state as the tab words it (``inspection``'s ``TaskRow.state``)."""
    states = {}
    for key in task.claimed:
        value = store.get(table, key) or {}
        status = value.get("status")
        if value.get("claimedBy") != task.execution_id:
            states[key] = "gone"
        elif status in (None, "in_flight", "held"):
            states[key] = "held"
        else:
            states[key] = "handed_back" if status in ("pending", "free") else "finished"
    return states


def _native_figures(page: Page) -> PageFigures:
    by = page._by
    statuses = {}
    for row in page.session.find_elements(by.CSS_SELECTOR, "#status-counts tr[data-status]"):
        cells = [cell.text.strip() for cell in row.find_elements(by.TAG_NAME, "td")]
        statuses[str(row.get_attribute("data-status"))] = int(cells[1])
    bars = {}
    for chart in CHART_BARS:
        drawn = page.element(chart).find_elements(by.CSS_SELECTOR, "rect.finished")
        bars[chart] = sum(1 for bar in drawn if bar.rect["width"] > 0)
    return PageFigures(
        rows=int(page.text("rows")),
        statuses=statuses,
        in_flight=int(page.text("in-flight-count")),
        stale_count=int(page.text("stale-count")),
        stale={},
        stale_runs={},
        backlog=int(page.text("activity-hour-backlog")),
        day_finished=int(page.text("activity-day-finished")),
        chart_bars=bars,
    )


def _tab_rows(page: Page) -> dict[str, str]:
    rows = page.session.find_elements(page._by.CSS_SELECTOR, "#ti-claimed tr[data-key]")
    return {
        str(row.get_attribute("data-key")): str(row.get_attribute("data-state")) for row in rows
    }


def _refused(page: Page, path: str, secrets: tuple[str, ...]) -> str:
    """Open ``path``; raise unless it shows the refusal and none of ``secrets``."""
    page.open(path, then="error")
    message = page.text("error")
    shown = [key for key in secrets if key in page.session.page_source]
    if shown or page.has("connections") or page.has("ti-claimed"):
        raise checks.CheckFailed(f"{path} showed {shown or 'store rows'} to a refused user")
    return message


def check_native_pages(
    *,
    base_url: str,
    username: str,
    password: str,
    viewer: str,
    viewer_password: str,
    store: AtomicStore,
    table: str,
    dispatcher: DispatcherTask,
    work_dir: Path,
    say: Callable[[str], None],
    screenshots: Path | None = None,
    conn_id: str = CONN_ID,
) -> dict[str, str]:
    """The page and the tab as Airflow's own UI renders them (no iframe), in headless Chromium.

    Signed in: the page lists the connection, the queue's counts (one moment between the
    store's before and after) and its charts; the dispatcher task's tab lists exactly the
    rows its claim took, each in the state the store gives it (where that did not change
    while the page was read). In the dark colour mode the page takes the theme's colours.
    Anonymous: the tab's route answers 401 with no row, the page sends to the login.
    A viewer (no connection may be read): both show the refusal and none of the rows.
    Screenshots of both, light and dark, go to ``screenshots`` (default ``work_dir``).
    """
    started = time.monotonic()
    shots = screenshots or work_dir
    shots.mkdir(parents=True, exist_ok=True)
    saved = []
    with chromium(work_dir / "chromium-native") as session:
        page = Page(session, base_url)
        page.sign_in(username, password, next_path=f"/{NAV_PAGE}", then="atomic-store")
        page.press(conn_id, then="tables")
        page.press(table, then="status-counts")
        page.wait_for("#activity-day rect.finished", CHART_BARS["activity-day"])
        before = checks.status_counts(checks.read_table(store, table))
        page.session.refresh()  # counts read between the store's two readings
        page.press(conn_id, then="tables")
        page.press(table, then="status-counts")
        page.wait_for("#activity-day rect.finished", CHART_BARS["activity-day"])
        shown = _native_figures(page)
        after = checks.status_counts(checks.read_table(store, table))
        figures_between(shown, before, after)
        chart_between(shown, before, after)
        light = page.colour_of("rows")
        page.scroll_to("stats-section")  # the screenshots show the queue: counts and charts
        session.save_screenshot(str(shots / "atomic-store-native-light.png"))
        page.dark(True)
        page.press(conn_id, then="tables")
        page.press(table, then="status-counts")
        page.wait_for("#activity-hour rect.finished", CHART_BARS["activity-hour"])
        dark = page.colour_of("rows")
        page.scroll_to("stats-section")
        session.save_screenshot(str(shots / "atomic-store-native-dark.png"))
        if dark == light:
            raise checks.CheckFailed(f"the page kept its colour ({light}) in the dark mode")

        states_before = _row_states(store, table, dispatcher)
        page.dark(False)
        page.open(dispatcher.tab_path, then="ti-claimed")
        page.wait_for("#ti-claimed tr[data-key]", len(dispatcher.claimed))
        listed = _tab_rows(page)
        states_after = _row_states(store, table, dispatcher)
        if set(listed) != set(dispatcher.claimed):
            raise checks.CheckFailed(
                f"the tab of {dispatcher.execution_id}'s {dispatcher.task_id} lists "
                f"{sorted(listed)}, not the rows its claim took: {sorted(dispatcher.claimed)}"
            )
        settled = {k: v for k, v in states_before.items() if states_after[k] == v}
        wrong = {k: (listed[k], v) for k, v in settled.items() if listed[k] != v}
        if wrong:
            raise checks.CheckFailed(f"the tab shows (shown, store) states {wrong}")
        session.save_screenshot(str(shots / "atomic-store-task-light.png"))
        page.dark(True)
        page.element("ti-claimed")
        page.wait_for("#ti-claimed tr[data-key]", len(dispatcher.claimed))
        session.save_screenshot(str(shots / "atomic-store-task-dark.png"))
        page.dark(False)
        saved = sorted(path.name for path in shots.glob("atomic-store-*-*.png"))

    query = f"dag_id={dispatcher.dag_id}&run_id={dispatcher.run_id}&task_id={dispatcher.task_id}"
    with chromium(work_dir / "chromium-anonymous") as session:
        page = Page(session, base_url)
        session.get(f"{base_url.rstrip('/')}/atomic-store/api/task-instance?{query}")
        body = str(session.find_element(page._by.TAG_NAME, "body").text)
        if "Not authenticated" not in body or any(key in body for key in dispatcher.claimed):
            raise checks.CheckFailed(f"an anonymous request for the tab got {body[:300]!r}")
        session.get(f"{page.base_url}/{NAV_PAGE}")
        page._wait.until(lambda _: "login" in session.current_url)
        if page.has("atomic-store"):
            raise checks.CheckFailed("an anonymous user was shown the store page")

    with chromium(work_dir / "chromium-viewer") as session:
        page = Page(session, base_url)
        page.sign_in(viewer, viewer_password, next_path=f"/{NAV_PAGE}", then="error")
        refused = _refused(page, NAV_PAGE, (conn_id, *dispatcher.claimed))
        _refused(page, dispatcher.tab_path, dispatcher.claimed)
    seconds = time.monotonic() - started
    say(
        f"browser: Airflow's UI rendered the store page ({shown.pending} pending, charts drawn) "
        f"and {dispatcher.task_id}'s tab of {dispatcher.run_id} ({len(listed)} rows) "
        f"({seconds:.0f}s)"
    )
    return {
        "native page": (
            f"rendered by Airflow's UI (no iframe), {shown.pending}/{shown.in_flight}/"
            f"{shown.done} pending/in flight/done between the store's before and after, "
            f"charts drawn, dark mode recoloured ({light} -> {dark}); "
            f"{dispatcher.run_id}'s {dispatcher.task_id} tab listed its {len(listed)} claimed "
            f"rows ({dict(Counter(listed.values()))}); anonymous 401 and sent to login; "
            f"viewer refused ({refused[:60]!r}); screenshots {', '.join(saved)} in "
            f"{_shown(shots)} ({seconds:.0f}s)"
        )
    }
