"""The "Atomic Store" tab of a task instance and the native page's bundle, through the API server.

The tab's route answers for a task instance of a real DAG run (``dag.test()``): the
rows its claim took and where each stands now, its receipts (replayed or applied by
its latest try, whose start Airflow's metadata database holds) and what its run
holds, per store connection the user may read. Anonymous users get 401, users the
auth manager refuses the connections or the DAG's task instances 403, and a user
refused one connection sees none of its rows. Every URL the UI is handed carries the
path of ``[api] base_url`` (a deployment under ``/airflow/``, in its own process:
Airflow reads the setting when its API app module is imported).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import task

from airflow_atomic_store import AtomicClaimOperator, AtomicStore
from airflow_atomic_store.templating import execution_id
from devkit.dagrun import DagRunResult, new_dag
from tests.support.api_server import client

# Airflow 3.0's own API models warn under today's pydantic (as in test_ui_page.py).
pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:Support for class-based `config` is deprecated:DeprecationWarning"
    ),
    pytest.mark.filterwarnings(
        "ignore:Using `@model_validator` with mode='after' on a classmethod:DeprecationWarning"
    ),
]

ROUTE = "/atomic-store/api/task-instance"
QUEUE = "jobs"


def _dispatch(run_dag: Any, store_conn: str, store_url: str, dag_id: str) -> DagRunResult:
    """A dispatcher run: claim three of five rows, finish one of them, hand one back."""
    with AtomicStore(store_url) as store:
        for n in range(5):
            store.put(QUEUE, f"job-{n}", {"status": "pending", "n": n})
    with new_dag(dag_id) as dag:
        drain = AtomicClaimOperator(task_id="drain", conn_id=store_conn, table=QUEUE, limit=3)

        @task
        def settle(claim: dict[str, Any], **context: Any) -> None:
            me = execution_id(context)
            first, second, _ = (row["key"] for row in claim["claimed"])
            with AtomicStore(store_url) as writer:
                for key, status in ((first, "done"), (second, "pending")):
                    guard = [{"field": "claimedBy", "operator": "equals", "value": me}]
                    done = [{"field": "status", "operation": "set", "value": status}]
                    writer.atomic_update(QUEUE, key, where=guard, mutations=done)

        settle(drain.output)
    result = run_dag(dag)
    assert result.state == "success", result.states()
    return result


def _params(run: DagRunResult, task_id: str = "drain", **extra: Any) -> dict[str, Any]:
    return {"dag_id": run.dag_id, "run_id": run.run_id, "task_id": task_id, **extra}


def test_the_tab_of_a_claim_task_lists_the_rows_it_claimed_and_its_receipt(
    api_app: Any, run_dag: Any, store_conn: str, store_url: str, dag_id: str
) -> None:
    run = _dispatch(run_dag, store_conn, store_url, dag_id)
    answer = client(api_app, "op").get(ROUTE, params=_params(run, conn=store_conn))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["used"] is True
    assert body["task_instance"]["latest_try_started_at"] is not None
    (used,) = body["connections"]
    assert used["conn_id"] == store_conn and used["execution_id"] == run.execution_id
    assert [(row["key"], row["state"]) for row in used["claimed"]] == [
        ("job-0", "finished"),
        ("job-1", "handed_back"),
        ("job-2", "held"),
    ]
    (receipt,) = used["receipts"]
    assert receipt["key"] == f"{run.execution_id}/drain/-1"
    assert (receipt["primitive"], receipt["claimed"]) == ("claim", ["job-0", "job-1", "job-2"])
    assert receipt["replayed"] is False  # written by the only try, after it started
    assert used["run_rows"] == []


def test_a_task_without_keyed_calls_shows_its_runs_rows_and_one_of_another_run_none(
    api_app: Any, run_dag: Any, store_conn: str, store_url: str, dag_id: str
) -> None:
    run = _dispatch(run_dag, store_conn, store_url, dag_id)
    with AtomicStore(store_url) as writer:  # the run's last held row, finished
        guard = [{"field": "status", "operator": "equals", "value": "in_flight"}]
        done = [{"field": "status", "operation": "set", "value": "done"}]
        writer.atomic_update(QUEUE, "job-2", where=guard, mutations=done)
    other = client(api_app, "op").get(ROUTE, params=_params(run, "never_ran", conn=store_conn))
    assert other.status_code == 200
    (used,) = other.json()["connections"]
    assert other.json()["used"] is True  # its run still has rows claimedBy it...
    assert used["receipts"] == [] and used["claimed"] == []  # ...but this task made no call
    unrelated = client(api_app, "op").get(
        ROUTE, params={"dag_id": "elsewhere", "run_id": "r", "task_id": "t", "conn": store_conn}
    )
    assert unrelated.json()["used"] is False


def test_the_tab_refuses_anonymous_users_and_roles_without_connection_access(
    api_app: Any, store_conn: str
) -> None:
    params = {"dag_id": "d", "run_id": "r", "task_id": "t"}
    assert client(api_app).get(ROUTE, params=params).status_code == 401
    for cookie in (False, True):
        refused = client(api_app, "viewer", cookie=cookie).get(
            ROUTE, params={**params, "conn": store_conn}
        )
        assert refused.status_code == 403
        assert client(api_app, "viewer", cookie=cookie).get(ROUTE, params=params).status_code == 403


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"run_id": "r", "task_id": "t"}, "dag_id"),
        ({"dag_id": "d", "task_id": "t"}, "run_id"),
        ({"dag_id": "d", "run_id": "r"}, "task_id"),
        ({"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": "first"}, "map_index"),
        ({"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": "-2"}, "map_index"),
    ],
)
def test_a_query_that_names_no_task_instance_is_a_400_naming_the_field(
    api_app: Any, params: dict[str, str], field: str
) -> None:
    answer = client(api_app, "op").get(ROUTE, params=params)
    assert answer.status_code == 400
    assert answer.json()["error"].startswith(f"{field}:")


class _Policy:
    """Grants the page, every DAG but ``hidden_dag`` and every connection but ``denied``,
    as a per-resource policy would (the simple auth manager decides per role only)."""

    def __init__(self, denied: str = "", hidden_dag: str = "") -> None:
        self.denied, self.hidden_dag = denied, hidden_dag

    def is_authorized_custom_view(self, *, method: str, resource_name: str, user: Any) -> bool:
        return True

    def is_authorized_connection(self, *, method: str, details: Any = None, user: Any) -> bool:
        return details is None or details.conn_id != self.denied

    def is_authorized_dag(
        self, *, method: str, user: Any, access_entity: Any, details: Any
    ) -> bool:
        return details.id != self.hidden_dag


def _app_under(policy: _Policy, monkeypatch: pytest.MonkeyPatch) -> Any:
    from fastapi.testclient import TestClient

    from airflow_atomic_store.ui import access, task_instance
    from airflow_atomic_store.ui.app import create_app

    monkeypatch.setattr(access, "get_auth_manager", lambda: policy)
    monkeypatch.setattr("airflow.api_fastapi.app.get_auth_manager", lambda: policy)
    app = create_app()
    app.dependency_overrides[access.api_user] = lambda: SimpleNamespace(username="alice")
    assert task_instance.tab_user  # the dependency that asks about the DAG
    return TestClient(app, base_url="http://testserver")


def test_a_user_refused_one_connection_sees_none_of_its_rows(
    run_dag: Any,
    store_conn: str,
    store_url: str,
    dag_id: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    run = _dispatch(run_dag, store_conn, store_url, dag_id)
    allowed_url = f"sqlite:///{tmp_path}/allowed.db"
    with AtomicStore(allowed_url) as allowed:  # the run also holds a row of another store
        allowed.put("other", "visible", {"status": "in_flight", "claimedBy": run.execution_id})
    monkeypatch.setenv("AIRFLOW_CONN_TAB_ALLOWED_STORE", allowed_url)
    tab = _app_under(_Policy(denied=store_conn), monkeypatch)

    every = tab.get("/api/task-instance", params=_params(run))
    assert every.status_code == 200, every.text
    listed = {entry["conn_id"] for entry in every.json()["connections"]}
    assert "tab_allowed_store" in listed and store_conn not in listed
    assert "job-" not in every.text
    assert tab.get("/api/task-instance", params=_params(run, conn=store_conn)).status_code == 403


def test_a_user_refused_the_dags_task_instances_is_refused_the_tab(
    run_dag: Any, store_conn: str, store_url: str, dag_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _dispatch(run_dag, store_conn, store_url, dag_id)
    tab = _app_under(_Policy(hidden_dag=run.dag_id), monkeypatch)
    refused = tab.get("/api/task-instance", params=_params(run, conn=store_conn))
    assert refused.status_code == 403 and "job-" not in refused.text


def test_the_bundle_is_served_as_javascript_and_nothing_else_is(api_app: Any) -> None:
    from airflow_atomic_store.ui import plugin

    anonymous = client(api_app)
    bundle = anonymous.get(f"/atomic-store/static/{plugin.BUNDLE}")
    assert bundle.status_code == 200
    assert bundle.headers["content-type"].startswith("text/javascript")
    assert bundle.content == plugin.static_file(plugin.BUNDLE)
    for name in ("atomic-store.sha256", "..%2Fplugin.py", "../plugin.py"):
        assert anonymous.get(f"/atomic-store/static/{name}").status_code == 404, name


def test_the_ui_gets_the_page_and_the_tab_as_react_apps_on_routes_of_their_own(
    api_app: Any,
) -> None:
    from airflow_atomic_store.compat import REACT_APPS

    plugins = client(api_app, "op").get("/api/v2/plugins", params={"limit": 100}).json()
    (ours,) = [p for p in plugins["plugins"] if p["name"] == "atomic_store"]
    apps = ours.get("react_apps", [])
    if not REACT_APPS:  # 3.0: the server-rendered page only, by its URL
        assert apps == [] and ours.get("external_views", []) == []
        return
    assert sorted((app["destination"], app["url_route"]) for app in apps) == [
        ("nav", "atomic-store"),
        ("task_instance", "atomic-store-task"),
    ]
    routes = [app["url_route"] for app in apps] + [v["url_route"] for v in ours["external_views"]]
    assert len(set(routes)) == len(routes) == 3  # Airflow drops a view whose route is taken
    (url,) = {app["bundle_url"] for app in apps}
    assert client(api_app).get(url).status_code == 200


SUB_PATH_PROBE = r"""
import json, os, re, sys
from airflow.utils import db
db.resetdb()
from airflow.api_fastapi.app import create_app, get_auth_manager
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from fastapi.testclient import TestClient
from airflow_atomic_store.compat import REACT_APPS
ui = TestClient(create_app(), base_url="http://testserver")
user = SimpleAuthManagerUser(username="op", role="op")
ui.headers["Authorization"] = "Bearer " + get_auth_manager().generate_jwt(user)
plugins = ui.get("/airflow/api/v2/plugins", params={"limit": 100}).json()["plugins"]
(ours,) = [p for p in plugins if p["name"] == "atomic_store"]
urls = [v["href"] for v in ours.get("external_views", [])]
urls += [a["bundle_url"] for a in ours.get("react_apps", [])]
page = ui.get("/airflow/atomic-store/", headers={"Accept": "text/html"})
json.dump({
    "react_apps": REACT_APPS,
    "urls": [[url, ui.get(url).status_code] for url in urls],
    "api": ui.get("/airflow/atomic-store/api/connections").status_code,
    "tab": ui.get("/airflow/atomic-store/api/task-instance",
                  params={"dag_id": "d", "run_id": "r", "task_id": "t"}).status_code,
    "root": ui.get("/atomic-store/api/connections").status_code,
    "links": re.findall(r'href="([^"]*)"', page.text),
}, sys.stdout)
"""


def test_under_a_sub_path_the_menu_entries_the_bundle_and_every_route_carry_it(
    tmp_path: Any,
) -> None:
    """``[api] base_url = http://testserver/airflow/``: Airflow mounts the app under
    ``/airflow``; the external view's ``href`` and the react apps' ``bundle_url`` that
    the UI is handed must be there too (``/atomic-store/`` was a 404 there)."""
    from tests.support.api_server import USERS

    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__API__BASE_URL": "http://testserver/airflow/",
        "AIRFLOW__API_AUTH__JWT_SECRET": "test-secret-" + "x" * 64,
        "AIRFLOW__API_AUTH__JWT_ISSUER": "airflow-atomic-store-tests",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": USERS,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    done = subprocess.run(
        [sys.executable, "-c", SUB_PATH_PROBE],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["api"] == 200 and probe["tab"] == 200 and probe["root"] == 404
    assert len(probe["urls"]) == (3 if probe["react_apps"] else 0), probe
    assert all(url.startswith("/airflow/atomic-store/") for url, _ in probe["urls"]), probe
    assert all(status == 200 for _, status in probe["urls"]), probe
    page_links = [link for link in probe["links"] if "atomic-store" in link]
    assert page_links and all("/airflow/atomic-store/" in link for link in page_links)
