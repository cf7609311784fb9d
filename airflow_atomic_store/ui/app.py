"""The page's FastAPI app: read-only views of a store, as HTML and as JSON.

Every route is a ``GET`` that depends on :data:`~airflow_atomic_store.ui.access.PageUser`
(401 without a signed-in user, 403 without the permissions), reads through
:class:`~airflow_atomic_store.inspection.StoreInspector` (one read-only snapshot
per call) and never writes. Bad input -- a ``where`` that is not JSON or that
the spec layer refuses, a threshold that is not a positive number, an unknown
connection -- is a 400 naming the field, shown on the page; an unreachable
database is a 503. The app has no OpenAPI or docs routes: each would be a
route without authentication.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import HTTPException
from fastapi.responses import HTMLResponse, JSONResponse, Response

from airflow_atomic_store.exceptions import (
    AtomicStoreError,
    ConnectionConfigError,
    SpecError,
    StoreUnavailableError,
)
from airflow_atomic_store.inspection import StoreInspector
from airflow_atomic_store.inspection.results import stamp
from airflow_atomic_store.spec import json_text
from airflow_atomic_store.ui import access, plugin, render
from airflow_atomic_store.ui.access import CONN_PARAM, PageUser
from airflow_atomic_store.ui.connections import open_store, store_connections
from airflow_atomic_store.ui.task_instance import (
    BadTaskInstance,
    TabUser,
    TaskInstanceRef,
    latest_try_start,
)

#: The stale threshold the page starts with: the stale-claim recovery recipe's default.
DEFAULT_STALE_AFTER_SECONDS = 600
PAGE_SIZE = 50
#: The activity charts of a queue: the last hour minute by minute, the last day by quarters.
ACTIVITY_CHARTS = (
    ("activity-hour", "Last hour, per minute", timedelta(hours=1), timedelta(minutes=1)),
    ("activity-day", "Last day, per 15 minutes", timedelta(days=1), timedelta(minutes=15)),
)
#: The most statuses a table's page lists (the largest counts; the rest are summed in one
#: line) and the most tables a connection's page lists (by name; another is opened by
#: name): 200,000 statuses or 50,000 tables made pages of 70 MB and 11 MB. ``/api`` lists all.
STATUS_LIMIT = 50
TABLE_LIMIT = 500

#: Status code of each store error (most specific first); the message is shown as it is.
ERROR_STATUS: tuple[tuple[type[AtomicStoreError], int], ...] = (
    (SpecError, 400),
    (ConnectionConfigError, 400),
    (StoreUnavailableError, 503),
    (AtomicStoreError, 400),
)


class PageError(Exception):
    """A request the page cannot answer, with the status and the message the user sees."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _status_of(error: AtomicStoreError) -> int:
    return next(status for kind, status in ERROR_STATUS if isinstance(error, kind))


@dataclass(frozen=True)
class Query:
    """The parsed query string of a store route."""

    conn_id: str
    table: str | None = None


def _required(request: Request, name: str) -> str:
    value = request.query_params.get(name, "").strip()
    if not value:
        raise PageError(400, f"{name}: required (pick it on the page before this one)")
    return value


def _stale_after(text: str | None) -> timedelta:
    if text is None or not text.strip():
        return timedelta(seconds=DEFAULT_STALE_AFTER_SECONDS)
    try:
        seconds = float(text)
    except ValueError:
        raise PageError(400, f"stale_after: not a number of seconds: {text!r}") from None
    if not 0 < seconds < 10**9:
        raise PageError(400, f"stale_after: must be a positive number of seconds, got {text!r}")
    return timedelta(seconds=seconds)


def _where(text: str | None) -> Any:
    if text is None or not text.strip():
        return None
    try:
        return json_text.loads(text, "where")
    except json.JSONDecodeError as exc:
        raise PageError(400, f"where: not valid JSON ({exc})") from None


def _integer(text: str | None, name: str, default: int) -> int:
    if text is None or not text.strip():
        return default
    try:
        return int(text)
    except ValueError:
        raise PageError(400, f"{name}: not an integer: {text!r}") from None


@contextmanager
def _inspector(conn_id: str) -> Iterator[StoreInspector]:
    """An inspector on the connection's store; a store error in the block becomes a PageError."""
    try:
        with open_store(conn_id) as store:
            yield StoreInspector(store)
    except AtomicStoreError as exc:
        raise PageError(_status_of(exc), str(exc)) from exc


def create_app() -> FastAPI:
    """The app the plugin mounts at ``/atomic-store``."""
    templates = render.environment()
    app = FastAPI(
        title="Atomic Store",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    def page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = templates.get_template(name).render(
            url_for=request.url_for, request=request, **context
        )
        return HTMLResponse(html, status_code=status, headers=render.SECURITY_HEADERS)

    def answer(
        request: Request,
        build: Callable[[], dict[str, Any]],
        template: str,
        form: Callable[[], dict[str, Any]] | None = None,
    ) -> Response:
        """Run ``build``; render ``template`` with its result, or JSON under ``/api``.

        On a :class:`PageError` the page says what is wrong: with ``form``, the same
        template again, its form filled in as sent (so a bad filter can be fixed).
        """
        as_json = request.url.path.rstrip("/").split("/")[-2:-1] == ["api"]
        try:
            context = build()
        except PageError as exc:
            if as_json:
                return JSONResponse({"error": exc.message}, status_code=exc.status)
            if form is not None:
                return page(request, template, exc.status, error=exc.message, **form())
            conn_id = access.requested_conn_id(request)
            return page(request, "error.html", exc.status, message=exc.message, conn_id=conn_id)
        if as_json:
            return JSONResponse(context["data"], headers={"Cache-Control": "no-store"})
        return page(request, template, **context)

    @app.exception_handler(HTTPException)
    async def refused(request: Request, exc: HTTPException) -> Response:
        """401 and 403 as a page for a browser, as JSON for a script; same status either way."""
        if "text/html" not in request.headers.get("accept", ""):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)
        return page(
            request,
            "refused.html",
            exc.status_code,
            signed_in=exc.status_code != 401,
            detail=str(exc.detail),
            login_url=access.login_url(str(request.url)),
        )

    # -- connections -----------------------------------------------------------------------

    def connections_context(user: Any) -> dict[str, Any]:
        listed = [c for c in store_connections() if access.may_read_connection(user, c.conn_id)]
        return {"connections": listed, "data": {"connections": [c.__dict__ for c in listed]}}

    @app.get("/", name="home")
    def home(request: Request, user: PageUser) -> Response:
        return answer(request, lambda: connections_context(user), "connections.html")

    @app.get("/api/connections", name="api_connections")
    def api_connections(request: Request, user: PageUser) -> Response:
        return answer(request, lambda: connections_context(user), "connections.html")

    # -- tables ----------------------------------------------------------------------------

    def tables_context(request: Request) -> dict[str, Any]:
        conn_id = _required(request, CONN_PARAM)
        with _inspector(conn_id) as inspector:
            tables = inspector.tables()
        return {
            "conn_id": conn_id,
            "tables": tables[:TABLE_LIMIT],
            "hidden_tables": max(len(tables) - TABLE_LIMIT, 0),
            "data": {"connection": conn_id, "tables": [t.to_dict() for t in tables]},
        }

    @app.get("/tables", name="tables")
    def tables(request: Request, user: PageUser) -> Response:
        return answer(request, lambda: tables_context(request), "tables.html")

    @app.get("/api/tables", name="api_tables")
    def api_tables(request: Request, user: PageUser) -> Response:
        return answer(request, lambda: tables_context(request), "tables.html")

    # -- one table's counts ----------------------------------------------------------------

    def stats_context(request: Request) -> dict[str, Any]:
        conn_id, table = _required(request, CONN_PARAM), _required(request, "table")
        stale_after = _stale_after(request.query_params.get("stale_after"))
        with _inspector(conn_id) as inspector:
            stats = inspector.stats(table, stale_after=stale_after)
            stale = inspector.stale(table, older_than=stale_after) if stats.stale_count else ()
            activity = inspector.activity(table) if stats.status_counts else None
        windows = [
            (element, title, activity.last(window, bucket))
            for element, title, window, bucket in ACTIVITY_CHARTS
            if activity is not None
        ]
        charts = [
            (element, render.activity_chart(shown, title)) for element, title, shown in windows
        ]
        statuses = render.largest(stats.status_counts, STATUS_LIMIT)
        return {
            "conn_id": conn_id,
            "table": table,
            "stats": stats,
            "statuses": statuses,
            "stale": stale,
            "stale_after_seconds": f"{stale_after.total_seconds():g}",
            "chart": render.status_chart(statuses.shown),
            "activity_charts": charts,
            "data": {
                **stats.to_dict(),
                "stale": [row.to_dict() for row in stale],
                "activity": {element: shown.to_dict() for element, _, shown in windows},
            },
        }

    @app.get("/stats", name="stats")
    def stats(request: Request, user: PageUser) -> Response:
        return answer(request, lambda: stats_context(request), "stats.html")

    @app.get("/api/stats", name="api_stats")
    def api_stats(request: Request, user: PageUser) -> Response:
        return answer(request, lambda: stats_context(request), "stats.html")

    # -- one table's rows ------------------------------------------------------------------

    def rows_form(request: Request) -> dict[str, Any]:
        params = request.query_params
        return {
            "conn_id": params.get(CONN_PARAM, ""),
            "table": params.get("table", ""),
            "where_text": params.get("where", ""),
            "match": params.get("match") or "all",
            "page": None,
        }

    def rows_context(request: Request) -> dict[str, Any]:
        conn_id, table = _required(request, CONN_PARAM), _required(request, "table")
        params = request.query_params
        where_text = params.get("where", "")
        match = params.get("match") or "all"
        limit = _integer(params.get("limit"), "limit", PAGE_SIZE)
        offset = _integer(params.get("offset"), "offset", 0)
        where = _where(where_text)
        with _inspector(conn_id) as inspector:
            result = inspector.rows(table, where=where, match=match, limit=limit, offset=offset)
        return {
            "conn_id": conn_id,
            "table": table,
            "page": result,
            "where_text": where_text,
            "match": match,
            "error": None,
            "data": result.to_dict(),
        }

    @app.get("/rows", name="rows")
    def rows(request: Request, user: PageUser) -> Response:
        return answer(
            request, lambda: rows_context(request), "rows.html", lambda: rows_form(request)
        )

    @app.get("/api/rows", name="api_rows")
    def api_rows(request: Request, user: PageUser) -> Response:
        return answer(request, lambda: rows_context(request), "rows.html")

    # -- one task instance (the UI's "Atomic Store" tab) -------------------------------------

    def task_instance_data(request: Request, user: Any) -> dict[str, Any]:
        try:
            ref = TaskInstanceRef.from_query(request)
        except BadTaskInstance as exc:
            raise PageError(400, str(exc)) from None
        started = latest_try_start(ref)
        named = access.requested_conn_id(request)
        conn_ids = (
            [named]
            if named is not None
            else [
                c.conn_id
                for c in store_connections()
                if access.may_read_connection(user, c.conn_id)
            ]
        )
        stores = []
        for conn_id in conn_ids:
            try:
                with _inspector(conn_id) as inspector:
                    view = inspector.task_instance(
                        ref.dag_id, ref.run_id, ref.task_id, ref.map_index, started_at=started
                    )
            except PageError as exc:  # one unreachable store does not hide the others
                stores.append({"conn_id": conn_id, "error": exc.message, "status": exc.status})
                continue
            stores.append({"conn_id": conn_id, **view.to_dict()})
        return {
            "task_instance": {**ref.to_dict(), "latest_try_started_at": stamp(started)},
            "used": any(entry.get("used") for entry in stores),
            "connections": stores,
        }

    @app.get("/api/task-instance", name="api_task_instance")
    def api_task_instance(request: Request, user: TabUser) -> Response:
        """JSON only: what the task instance did in each store connection the user may read."""
        try:
            data = task_instance_data(request, user)
        except PageError as exc:
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        return JSONResponse(data, headers={"Cache-Control": "no-store"})

    # -- the UI's bundle ---------------------------------------------------------------------

    @app.get("/static/{name}", name="static")
    def static(name: str) -> Response:
        """The native page's code, like Airflow's own assets: served to anyone, it holds no
        data (every route it reads checks the user). Only the bundle: no path is a file name."""
        if name != plugin.BUNDLE:
            raise HTTPException(404, "Not Found")
        return Response(
            plugin.static_file(name),
            media_type="text/javascript",
            headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "public, max-age=3600"},
        )

    return app
