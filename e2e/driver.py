"""The scenario's hands on a deployment: trigger runs with readable ids, read their states.

Every phase (``scenario``, ``claim_retry``, ``event_dispatch``, ``semaphore_phase``,
``celery_hosts``) drives the deployment through one :class:`Driver`. It lives apart
from ``scenario`` so that the phases need nothing of the scenario that runs them: the
scenario imports the phases, never the other way round (tests/test_layout.py pins
that ``e2e/`` has no import cycle).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.api import AirflowApi
from e2e.deployment import Deployment

__all__ = ["ITEMS", "Driver", "Options"]

ITEMS = 500  # the default; python -m e2e --items


@dataclass(frozen=True)
class Options:
    """What one run of the scenario covers (``python -m e2e`` sets them from its flags)."""

    items: int = ITEMS
    browser: bool = True  # the UI page checked in headless Chromium
    events: bool = True  # the event-driven dispatcher's phase (e2e/event_dispatch.py)
    semaphore: bool = True  # the 2-slot semaphore phase (e2e/semaphore_phase.py)
    idle_seconds: float = 0.0  # its queue idle at least this long (default: the main drain's time)
    screenshot: Path | None = None  # the page's screenshot (default: in the deployment's root)


class Driver:
    """Triggers runs with readable ids and reads their states, through the REST API."""

    def __init__(
        self,
        api: AirflowApi,
        deployment: Deployment,
        say: Callable[[str], None],
        options: Options,
    ):
        self.api = api
        self.deployment = deployment
        self.say = say
        self.options = options
        #: The run ids this driver triggered, per DAG, in order.
        self.triggered: dict[str, list[str]] = {}

    def count(self, dag_id: str) -> int:
        return len(self.triggered.get(dag_id, []))

    def trigger(self, dag_id: str, label: str, conf: dict[str, Any] | None = None) -> str:
        run_id = f"e2e-{label}-{self.count(dag_id) + 1:03d}"
        self.api.trigger(dag_id, run_id, conf or {})
        self.triggered.setdefault(dag_id, []).append(run_id)
        return run_id

    def states(self, dag_id: str) -> dict[str, str]:
        return {run["dag_run_id"]: run["state"] for run in self.api.runs(dag_id)}

    def open_runs(self) -> Counter[str]:
        """How many runs of each DAG are queued or running (one REST call)."""
        return Counter(run["dag_id"] for run in self.api.open_runs())

    def all_finished(self) -> bool:
        return not self.open_runs()
