"""A small client of Airflow 3's public REST API (``/api/v2``), the way an operator drives it.

Authentication is the simple auth manager's: ``POST /auth/token`` with a user
name and password gives a JWT sent as a bearer token. Every call retries a few
times on connection errors and 5xx answers (a busy 2-core machine is slow, not
broken).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

__all__ = ["AirflowApi", "ApiError"]

TERMINAL_RUN_STATES = frozenset({"success", "failed"})


class ApiError(RuntimeError):
    """The REST API refused a request or kept failing."""


class AirflowApi:
    """Calls to ``base_url``'s REST API as ``username``."""

    def __init__(self, base_url: str, username: str, password: str, *, timeout: float = 60.0):
        self.base_url = base_url.rstrip("/")
        self.username = username
        self.password = password
        self._client = httpx.Client(base_url=self.base_url, timeout=timeout)
        self._token: str | None = None

    def close(self) -> None:
        self._client.close()

    # -- plumbing ----------------------------------------------------------------------------

    def _login(self) -> str:
        response = self._client.post(
            "/auth/token", json={"username": self.username, "password": self.password}
        )
        if response.status_code not in (200, 201):
            raise ApiError(f"login failed: {response.status_code} {response.text}")
        token: str = response.json()["access_token"]
        return token

    def request(
        self, method: str, path: str, *, ok: tuple[int, ...] = (200,), **kwargs: Any
    ) -> httpx.Response:
        """One REST call; retries transport errors and 5xx, raises on anything not in ``ok``."""
        last: str = ""
        for attempt in range(6):
            if attempt:
                time.sleep(min(2.0 * attempt, 8.0))
            try:
                if self._token is None:
                    self._token = self._login()
                response = self._client.request(
                    method,
                    f"/api/v2{path}",
                    headers={"Authorization": f"Bearer {self._token}"},
                    **kwargs,
                )
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code == 401:
                self._token = None
                last = "401 unauthorized"
                continue
            if response.status_code >= 500:
                last = f"{response.status_code} {response.text[:300]}"
                continue
            if response.status_code not in ok:
                raise ApiError(f"{method} {path}: {response.status_code} {response.text[:500]}")
            return response
        raise ApiError(f"{method} {path} kept failing: {last}")

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params).json()

    # -- health and DAGs ------------------------------------------------------------------------

    def health(self) -> dict[str, Any] | None:
        """``/api/v2/monitor/health`` (no authentication), or None while the server is down."""
        try:
            response = self._client.get("/api/v2/monitor/health", timeout=10)
        except httpx.TransportError:
            return None
        if response.status_code != 200:
            return None
        body: dict[str, Any] = response.json()
        return body

    def execution_health(self) -> bool:
        """Whether the execution API (``/execution/health``) answers."""
        try:
            response = self._client.get("/execution/health", timeout=60)
        except httpx.TransportError:
            return False
        return response.status_code == 200

    def dag(self, dag_id: str) -> dict[str, Any] | None:
        response = self.request("GET", f"/dags/{dag_id}", ok=(200, 404))
        if response.status_code == 404:
            return None
        body: dict[str, Any] = response.json()
        return body

    def import_errors(self) -> list[dict[str, Any]]:
        errors: list[dict[str, Any]] = self.get("/importErrors", limit=100)["import_errors"]
        return errors

    def unpause(self, dag_id: str) -> None:
        self.request("PATCH", f"/dags/{dag_id}", json={"is_paused": False})

    def pause(self, dag_id: str) -> None:
        self.request("PATCH", f"/dags/{dag_id}", json={"is_paused": True})

    def request_reparse(self, file_token: str) -> None:
        """Ask the DAG processor to parse a DAG's file now (``file_token`` from :meth:`dag`)."""
        self.request("PUT", f"/parseDagFile/{file_token}", ok=(200, 201))

    def asset_watchers(self, name: str) -> list[dict[str, Any]]:
        """The watchers Airflow has registered for the asset ``name`` (none yet: empty)."""
        assets = self.get("/assets", name_pattern=name, limit=100)["assets"]
        return [
            watcher for asset in assets if asset["name"] == name for watcher in asset["watchers"]
        ]

    # -- runs ----------------------------------------------------------------------------------

    def trigger(self, dag_id: str, run_id: str, conf: dict[str, Any] | None = None) -> None:
        """Create a manual run ``run_id`` (queued; the scheduler starts it)."""
        body = {"dag_run_id": run_id, "logical_date": None, "conf": conf or {}}
        response = self.request("POST", f"/dags/{dag_id}/dagRuns", json=body, ok=(200, 409))
        if response.status_code == 409:  # a retried POST that had gone through
            existing = self.get(f"/dags/{dag_id}/dagRuns/{run_id}")
            if existing.get("dag_run_id") != run_id:
                raise ApiError(f"run {run_id} of {dag_id}: conflict {response.text[:300]}")

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        body: dict[str, Any] = self.get(f"/dags/{dag_id}/dagRuns/{run_id}")
        return body

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return list(self._pages(f"/dags/{dag_id}/dagRuns", "dag_runs"))

    def open_runs(self) -> list[dict[str, Any]]:
        """Every queued or running run of every DAG, in one call."""
        return list(self._pages("/dags/~/dagRuns", "dag_runs", state=["queued", "running"]))

    def task_instances(
        self, dag_id: str, run_id: str = "~", **filters: Any
    ) -> list[dict[str, Any]]:
        """Task instances of one run (or every run, ``"~"``), e.g. ``state="running"``.

        Ordered by ``id`` (a UUIDv7, so in creation order). The endpoint's default,
        ``map_index``, breaks offset paging: a run that starts while we page adds a
        ``map_index`` -1 task instance at the front and shifts every later one a page
        on, so one comes back twice (and ties across runs have no stable order).
        """
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
        filters.setdefault("order_by", "id")
        return list(self._pages(path, "task_instances", **filters))

    def tries(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        """Every try of an unmapped task instance (``.../tries``), oldest first."""
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/tries"
        tries: list[dict[str, Any]] = self.get(path)["task_instances"]
        return sorted(tries, key=lambda entry: int(entry["try_number"]))

    def xcom(
        self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1
    ) -> Any:
        """An XCom value (JSON), or None if the task pushed none."""
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        response = self.request("GET", path, params={"map_index": map_index}, ok=(200, 404))
        if response.status_code == 404:
            return None
        value = response.json()["value"]
        if isinstance(value, str):  # stored serialised
            try:
                return json.loads(value)
            except ValueError:
                return value
        return value

    def _pages(self, path: str, key: str, **params: Any) -> Iterator[dict[str, Any]]:
        offset = 0
        while True:
            page = self.get(path, limit=100, offset=offset, **params)
            items = page[key]
            yield from items
            offset += len(items)
            if not items or offset >= page["total_entries"]:
                return


def wait_for(
    condition: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    interval: float = 1.0,
    check: Callable[[], None] | None = None,
) -> Any:
    """Poll ``condition`` until it returns something truthy; return that.

    ``check`` runs on every poll (e.g. "are the components alive?") and may raise.
    Raises ``TimeoutError`` naming ``what`` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        if check is not None:
            check()
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
