"""The "Atomic Store" page, through the API server's own app (``airflow.api_fastapi.app``).

The page is what Airflow mounts from the ``airflow.plugins`` entry point, requested
as the API server serves it: an anonymous client, a signed-in ``viewer`` (whom the
simple auth manager does not let read connections) and a signed-in ``op``, each
with a real JWT from the auth manager, as a Bearer header or the UI's ``_token``
cookie. Every store is the test's fresh SQLite or PostgreSQL store.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest

from airflow_atomic_store import AtomicStore
from tests.support.api_server import client, token
from tests.support.physical import nowhere_url, store_objects

# Airflow 3.0's own API models use pydantic's class-based config and classmethod
# "after" validators, both of which warn under today's pydantic: Airflow's, not ours.
pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:Support for class-based `config` is deprecated:DeprecationWarning"
    ),
    pytest.mark.filterwarnings(
        "ignore:Using `@model_validator` with mode='after' on a classmethod:DeprecationWarning"
    ),
]

QUEUE = "jobs"
PREFIX = "/atomic-store"
#: Every route of the page, with the query each needs to reach the store.
ROUTES = (
    "/",
    "/tables",
    "/stats",
    "/rows",
    "/api/connections",
    "/api/tables",
    "/api/stats",
    "/api/rows",
)
LONG_AGO = "2020-01-01T00:00:00.000000Z"
FAR_AHEAD = "2999-01-01T00:00:00.000000Z"


_client, _token = client, token


@pytest.fixture
def op(api_app: Any) -> Any:
    return _client(api_app, "op")


def _queue(store: AtomicStore) -> None:
    """Seven rows: three pending, one claimed long ago (stale), two claimed now, one done."""
    for n in range(5):
        store.put(QUEUE, f"job-{n}", {"status": "pending", "n": n})
    store.put(
        QUEUE, "job-old", {"status": "in_flight", "claimedAt": LONG_AGO, "claimedBy": "dead/run"}
    )
    store.put(QUEUE, "job-done", {"status": "done"})
    claimed = store.atomic_claim(QUEUE, limit=2, execution_id="queue_dispatcher/run-7")
    assert claimed["count"] == 2


def _text_of(html: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', html)
    assert found is not None, f"no element {element_id!r} in the page"
    return found.group(1).strip()


def test_an_anonymous_request_is_refused_with_401_on_every_route(
    api_app: Any, store_conn: str
) -> None:
    client = _client(api_app)
    for route in ROUTES:
        response = client.get(f"{PREFIX}{route}", params={"conn": store_conn, "table": QUEUE})
        assert response.status_code == 401, route
    page = client.get(f"{PREFIX}/stats", params={"table": QUEUE}, headers={"Accept": "text/html"})
    assert page.status_code == 401
    assert "Sign in to Airflow first" in page.text
    # The sign-in link is the auth manager's, and brings the user back to this page.
    from urllib.parse import parse_qs, urlsplit

    from airflow.api_fastapi.app import get_auth_manager

    found = re.search(r'id="sign-in" href="([^"]+)"', page.text)
    assert found is not None
    link = found.group(1).replace("&amp;", "&")
    back = f"http://testserver{PREFIX}/stats?table={QUEUE}"
    assert link == get_auth_manager().get_url_login(next_url=back)
    if "?" in link:  # 3.0's simple auth manager takes no next_url: its login page alone
        assert parse_qs(urlsplit(link).query)["next"] == [back]


def test_a_user_without_connection_access_is_refused_with_403_on_every_route(
    api_app: Any, store_conn: str
) -> None:
    for cookie in (False, True):
        client = _client(api_app, "viewer", cookie=cookie)
        for route in ROUTES:
            response = client.get(f"{PREFIX}{route}", params={"conn": store_conn, "table": QUEUE})
            assert response.status_code == 403, route


def test_a_forged_token_is_not_a_user(api_app: Any) -> None:
    client = _client(api_app)
    client.headers["Authorization"] = "Bearer not.a.jwt"
    assert client.get(f"{PREFIX}/api/connections").status_code in (401, 403)


def test_the_page_has_only_get_routes_and_refuses_every_other_method(
    op: Any, store_conn: str
) -> None:
    from airflow_atomic_store.ui.plugin import AtomicStorePlugin

    (mounted,) = AtomicStorePlugin.fastapi_apps
    methods = {method for route in mounted["app"].routes for method in route.methods}
    assert methods <= {"GET", "HEAD"}
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        response = op.request(method, f"{PREFIX}/rows", params={"conn": store_conn, "table": QUEUE})
        assert response.status_code == 405, method


def test_the_app_publishes_no_unauthenticated_docs_or_schema(api_app: Any) -> None:
    client = _client(api_app)
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert client.get(f"{PREFIX}{path}").status_code in (401, 404), path


def test_the_queue_page_shows_counts_oldest_pending_in_flight_and_stale_claims(
    op: Any, store: AtomicStore, store_conn: str
) -> None:
    _queue(store)
    page = op.get(
        f"{PREFIX}/stats", params={"conn": store_conn, "table": QUEUE, "stale_after": "600"}
    )
    assert page.status_code == 200, page.text
    html = page.text
    assert _text_of(html, "rows") == "7"
    assert _text_of(html, "pending-count") == "3"
    assert _text_of(html, "in-flight-count") == "3"
    assert _text_of(html, "stale-count") == "1"
    assert re.fullmatch(r"\d+ (s|min)( \d+ s)?", _text_of(html, "oldest-pending"))
    assert '<svg id="status-chart"' in html
    stale_table = html.split('id="stale-claims"')[1].split("</table>")[0]
    assert "job-old" in stale_table and "dead/run" in stale_table
    assert "job-0" not in stale_table  # claimed just now: in flight, not stale
    by_run = re.findall(
        r'<tr data-claimed-by="([^"]+)"><td>[^<]*</td><td class="num">(\d+)</td>', html
    )
    assert by_run == [("dead/run", "1")]
    in_flight = html.split('id="in-flight"')[1].split("</table>")[0]
    assert in_flight.count('class="tag fresh"') == 2 and "queue_dispatcher/run-7" in in_flight

    data = op.get(f"{PREFIX}/api/stats", params={"conn": store_conn, "table": QUEUE}).json()
    assert data["status_counts"] == {"done": 1, "in_flight": 3, "pending": 3}
    assert data["stale_after_seconds"] == 600
    assert [row["key"] for row in data["stale"]] == ["job-old"]


def test_the_queue_page_charts_items_finished_per_minute_and_the_backlog_without_network(
    op: Any, store: AtomicStore, store_conn: str
) -> None:
    """The last hour per minute and the last day per quarter, as inline SVG drawn on the
    server (the page loads nothing and runs no script)."""
    _queue(store)
    params = {"conn": store_conn, "table": QUEUE}
    page = op.get(f"{PREFIX}/stats", params=params)
    html = page.text
    for element, bars in (("activity-hour", 60), ("activity-day", 96)):
        assert _text_of(html, f"{element}-finished") == "1"  # job-done
        assert _text_of(html, f"{element}-backlog") == "6"  # 3 pending + 3 in flight
        svg = html.split(f'<svg id="{element}"')[1].split("</svg>")[0]
        assert svg.count('<rect class="finished"') == bars
        assert '<polyline class="backlog" points="' in svg
        assert "http" not in svg.replace("http://www.w3.org/2000/svg", "")
    assert "<script" not in html and "src=" not in html
    data = op.get(f"{PREFIX}/api/stats", params=params).json()["activity"]
    assert [len(data[e]["points"]) for e in ("activity-hour", "activity-day")] == [60, 96]
    assert data["activity-hour"]["points"][-1]["backlog"] == 6


def test_the_stale_threshold_is_the_one_the_user_sets(
    op: Any, store: AtomicStore, store_conn: str
) -> None:
    _queue(store)
    params = {"conn": store_conn, "table": QUEUE}
    huge = op.get(f"{PREFIX}/stats", params={**params, "stale_after": "900000000"}).text
    assert _text_of(huge, "stale-count") == "0" and 'id="no-stale"' in huge
    tiny = op.get(f"{PREFIX}/stats", params={**params, "stale_after": "0.000001"}).text
    assert _text_of(tiny, "stale-count") == "3"
    for bad in ("-5", "0", "soon"):
        refused = op.get(f"{PREFIX}/stats", params={**params, "stale_after": bad})
        assert refused.status_code == 400 and "stale_after" in refused.text, bad


def test_the_tables_page_lists_every_table_with_its_row_count(
    op: Any, store: AtomicStore, store_conn: str
) -> None:
    _queue(store)
    store.put("leases", "leader", {"holder": "a", "expiresAt": FAR_AHEAD})
    data = op.get(f"{PREFIX}/api/tables", params={"conn": store_conn}).json()
    assert data["tables"] == [{"table": QUEUE, "rows": 7}, {"table": "leases", "rows": 1}]
    html = op.get(f"{PREFIX}/tables", params={"conn": store_conn}).text
    assert f"/atomic-store/stats?conn={store_conn}&amp;table=leases" in html


def test_a_store_with_more_tables_than_the_page_lists_says_so_and_opens_any_by_name(
    op: Any, store: AtomicStore, store_conn: str
) -> None:
    """50,000 tables made an 11 MB page: it lists TABLE_LIMIT, says how many more."""
    from airflow_atomic_store.ui.app import TABLE_LIMIT

    for n in range(TABLE_LIMIT + 5):
        store.put(f"t{n:04d}", "k", {"n": n})
    html = op.get(f"{PREFIX}/tables", params={"conn": store_conn}).text
    listed = html.split('id="tables"')[1].split("</table>")[0]
    assert listed.count("<tr>") == TABLE_LIMIT + 1  # the header row, then the tables
    assert "5 more are not listed" in _text_of(html, "hidden-tables")
    assert 'id="table-name"' in html  # the form that opens one by name
    data = op.get(f"{PREFIX}/api/tables", params={"conn": store_conn}).json()
    assert len(data["tables"]) == TABLE_LIMIT + 5


def test_a_table_with_more_statuses_than_the_page_lists_sums_the_rest(
    op: Any, store: AtomicStore, store_conn: str
) -> None:
    """200,000 statuses made a 70 MB page: it lists the STATUS_LIMIT largest, sums the rest."""
    from airflow_atomic_store.ui.app import STATUS_LIMIT

    for n in range(STATUS_LIMIT + 10):
        store.put(QUEUE, f"one-{n}", {"status": f"s{n:03d}"})
    for n in range(3):
        store.put(QUEUE, f"pending-{n}", {"status": "pending"})
    params = {"conn": store_conn, "table": QUEUE}
    html = op.get(f"{PREFIX}/stats", params=params).text
    listed = html.split('id="status-counts"')[1].split("</table>")[0]
    assert listed.count("<tr>") == STATUS_LIMIT + 1  # the header row, then the statuses
    assert '<td>pending</td><td class="num">3</td>' in listed  # the largest stays
    other = re.search(r'id="other-statuses"><td>(\d+) other statuses', listed)
    assert other is not None and other.group(1) == "11"
    chart = html.split('id="status-chart"')[1].split("</svg>")[0]
    assert chart.count("<rect") == STATUS_LIMIT
    data = op.get(f"{PREFIX}/api/stats", params=params).json()
    assert len(data["status_counts"]) == STATUS_LIMIT + 11


def test_rows_are_paged_filtered_and_shown_as_formatted_json(
    op: Any, store: AtomicStore, store_conn: str
) -> None:
    _queue(store)
    where = '[{"field": "status", "operator": "equals", "value": "pending"}]'
    params = {"conn": store_conn, "table": QUEUE, "where": where, "limit": "2"}
    first = op.get(f"{PREFIX}/rows", params=params)
    assert first.status_code == 200, first.text
    assert re.findall(r'<tr data-key="([^"]+)"', first.text) == ["job-2", "job-3"]
    assert "&#34;status&#34;: &#34;pending&#34;" in first.text  # indented JSON, escaped
    assert 'id="next"' in first.text and 'id="previous"' not in first.text
    second = op.get(f"{PREFIX}/rows", params={**params, "offset": "2"})
    assert re.findall(r'<tr data-key="([^"]+)"', second.text) == ["job-4"]
    assert 'id="next"' not in second.text and 'id="previous"' in second.text


@pytest.mark.parametrize(
    ("where", "field"),
    [
        ('[{"field": "status", "operator": "resembles", "value": 1}]', "operator"),
        ('[{"field": "a..b", "operator": "equals", "value": 1}]', "field"),
        ('[{"field": "status", "operator": "equals"', "where"),
    ],
)
def test_a_bad_filter_is_a_400_that_names_the_problem_with_the_form_kept(
    op: Any, store: AtomicStore, store_conn: str, where: str, field: str
) -> None:
    _queue(store)
    params = {"conn": store_conn, "table": QUEUE, "where": where}
    page = op.get(f"{PREFIX}/rows", params=params)
    assert page.status_code == 400
    message = _text_of(page.text, "error")
    assert field in message
    assert 'id="where"' in page.text  # the filter box, holding what was sent
    data = op.get(f"{PREFIX}/api/rows", params=params)
    assert data.status_code == 400 and field in data.json()["error"]


def test_leases_show_held_or_expired_and_buckets_their_tokens(
    op: Any, store: AtomicStore, store_conn: str
) -> None:
    store.put("coord", "held", {"holder": "run-1", "expiresAt": FAR_AHEAD})
    store.put("coord", "expired", {"holder": "run-0", "expiresAt": LONG_AGO})
    store.put("coord", "bucket", {"tokens": 7, "capacity": 10})
    html = op.get(f"{PREFIX}/rows", params={"conn": store_conn, "table": "coord"}).text
    rows = dict(re.findall(r'<tr data-key="([^"]+)">(.*?)</tr>', html, flags=re.S))
    assert "lease held" in rows["held"]
    assert "lease expired" in rows["expired"]
    assert "bucket: 7 tokens" in rows["bucket"]


def test_row_values_and_names_are_shown_as_text_never_as_markup(
    op: Any, store: AtomicStore, store_conn: str
) -> None:
    script = "<script>alert('x')</script>"
    table = '<img src=x onerror="alert(1)">'
    store.put(table, f"<b>{script}</b>", {"status": script, "note": script, "claimedBy": script})
    params = {"conn": store_conn, "table": table}
    for route in ("/tables", "/stats", "/rows"):
        response = op.get(f"{PREFIX}{route}", params=params)
        assert response.status_code == 200, route
        assert "<script>" not in response.text and "<img" not in response.text, route
        assert "script-src" not in response.headers["content-security-policy"]
        assert "default-src 'none'" in response.headers["content-security-policy"]
    rows = op.get(f"{PREFIX}/rows", params=params).text
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in rows


def test_the_chooser_lists_store_connections_never_their_passwords(
    op: Any, store_conn: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_UI_SECRET_PG", "postgresql://alice:s3cr3t-pa55@db.example:5433/queues"
    )
    monkeypatch.setenv("AIRFLOW_CONN_UI_NOT_A_STORE", "http://bob:hunter2@example.com")
    page = op.get(f"{PREFIX}/")
    assert page.status_code == 200
    assert "ui_secret_pg" in page.text and "db.example:5433/queues" in page.text
    assert store_conn in page.text
    assert "s3cr3t" not in page.text and "alice" not in page.text
    assert "ui_not_a_store" not in page.text and "hunter2" not in page.text
    listed = op.get(f"{PREFIX}/api/connections").json()["connections"]
    assert all(set(c) == {"conn_id", "conn_type", "location", "source"} for c in listed)


def test_an_unknown_connection_is_a_clear_message_not_a_500(op: Any) -> None:
    page = op.get(f"{PREFIX}/tables", params={"conn": "no_such_store"})
    assert page.status_code == 400
    assert "no_such_store" in _text_of(page.text, "error")


def test_the_ui_cookie_signs_the_browser_in(
    api_app: Any, store: AtomicStore, store_conn: str
) -> None:
    _queue(store)
    browser = _client(api_app, "op", cookie=True)
    page = browser.get(f"{PREFIX}/stats", params={"conn": store_conn, "table": QUEUE})
    assert page.status_code == 200
    assert _text_of(page.text, "pending-count") == "3"


def test_reading_every_page_changes_nothing_in_the_store(
    op: Any, store: AtomicStore, store_conn: str
) -> None:
    _queue(store)
    before = store.query(QUEUE, limit=100)
    for route in ROUTES:
        assert op.get(f"{PREFIX}{route}", params={"conn": store_conn, "table": QUEUE}).is_success
    assert store.query(QUEUE, limit=100) == before


def test_the_api_server_lists_the_plugin_with_the_page_and_its_navigation_entry(op: Any) -> None:
    from airflow_atomic_store.compat import EXTERNAL_VIEWS

    plugins = op.get("/api/v2/plugins", params={"limit": 100}).json()["plugins"]
    (plugin,) = [p for p in plugins if p["name"] == "atomic_store"]
    assert [app["url_prefix"] for app in plugin["fastapi_apps"]] == [PREFIX]
    hrefs = [view["href"] for view in plugin.get("external_views", [])]
    assert hrefs == ([f"{PREFIX}/"] if EXTERNAL_VIEWS else [])
    if EXTERNAL_VIEWS:  # the menu entry's icon: an SVG inlined as a data URL
        import base64
        from xml.etree import ElementTree

        (view,) = plugin["external_views"]
        kind, _, encoded = view["icon"].partition(";base64,")
        assert kind == "data:image/svg+xml"
        svg = ElementTree.fromstring(base64.b64decode(encoded))
        assert svg.tag == "{http://www.w3.org/2000/svg}svg"


def test_importing_the_plugin_does_not_build_the_app() -> None:
    # Every task process imports plugins; the page's app must load only in the API server.
    code = (
        "import sys, airflow_atomic_store.ui.plugin as p\n"
        "assert 'airflow_atomic_store.ui.app' not in sys.modules\n"
        "p.AtomicStorePlugin.name\n"
        "print('light')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0 and "light" in result.stdout, result.stderr


def test_the_3_0_user_dependency_reads_the_bearer_header_or_the_ui_cookie(
    api_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Airflow 3.0's get_user reads only the header; compat reads the cookie too there.
    import airflow
    from fastapi import Depends, FastAPI
    from fastapi.testclient import TestClient

    from airflow_atomic_store import compat

    monkeypatch.setattr(airflow, "__version__", "3.0.6")
    dependency = compat._api_user()
    assert dependency.__module__ == "airflow_atomic_store.ui.cookie_user"

    probe = FastAPI()

    @probe.get("/who")
    def who(user: Any = Depends(dependency)) -> dict[str, str]:  # noqa: B008 (a local dependency)
        return {"user": user.get_id()}

    client = TestClient(probe)
    assert client.get("/who").status_code == 401
    assert client.get("/who", headers={"Authorization": "Bearer nonsense"}).status_code == 403
    bearer = client.get("/who", headers={"Authorization": f"Bearer {_token('op')}"})
    assert bearer.json() == {"user": "op"}
    client.cookies.set("_token", _token("viewer"))
    assert client.get("/who").json() == {"user": "viewer"}


class _PerConnectionAuthManager:
    """Grants the page and every connection but ``denied``, as a policy per connection
    (Keycloak's, a custom one) would; the simple auth manager decides per role only."""

    def __init__(self, denied: str) -> None:
        self.denied = denied

    def is_authorized_custom_view(self, *, method: str, resource_name: str, user: Any) -> bool:
        return True

    def is_authorized_connection(self, *, method: str, details: Any = None, user: Any) -> bool:
        return details is None or details.conn_id != self.denied


@pytest.mark.parametrize("spelling", ["{id}", " {id} ", "{ID}", " {ID}", "{long_s}"])
def test_a_connection_refused_by_name_stays_refused_however_the_request_spells_it(
    store_conn: str, store: AtomicStore, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    """The check and the lookup read one name: blanks are dropped for both, and
    ``AIRFLOW_CONN_*`` is found by the upper-cased id, so every case form is checked,
    Unicode's too: ``"\u017f".upper()`` (LATIN SMALL LETTER LONG S) is ``"S"``."""
    from types import SimpleNamespace

    from fastapi.testclient import TestClient

    from airflow_atomic_store.ui import access
    from airflow_atomic_store.ui.app import create_app

    store.put("payroll", "emp-1", {"salary": 1})
    monkeypatch.setattr(access, "get_auth_manager", lambda: _PerConnectionAuthManager(store_conn))
    app = create_app()
    app.dependency_overrides[access.api_user] = lambda: SimpleNamespace(username="alice")
    client = TestClient(app, base_url="http://testserver")
    long_s = store_conn.replace("s", "\u017f")
    assert long_s != store_conn and long_s.upper() == store_conn.upper()
    conn = spelling.format(id=store_conn, ID=store_conn.upper(), long_s=long_s)
    response = client.get("/api/rows", params={"conn": conn, "table": "payroll"})
    assert response.status_code == 403
    assert "salary" not in response.text


def test_a_connection_where_no_store_is_is_a_400_and_nothing_is_created(
    op: Any, store_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page opens the store read-only: a typo in a connection creates no store."""
    url = nowhere_url(store_url, tmp_path)
    monkeypatch.setenv("AIRFLOW_CONN_TYPO_STORE", url)
    params = {"conn": "typo_store", "table": QUEUE}
    for route in ("/api/tables", "/api/stats", "/api/rows"):
        response = op.get(f"{PREFIX}{route}", params=params)
        assert response.status_code == 400, (route, response.text)
        assert re.match(r"no (SQLite|atomic) store", response.json()["error"]), route
    page = op.get(f"{PREFIX}/tables", params=params, headers={"Accept": "text/html"})
    assert page.status_code == 400 and "store" in page.text
    assert store_objects(url) == ([] if url == store_url else None)
    assert not (tmp_path / "nested").exists()
