"""The specs and DAG arguments that many tests share, declared once.

A queue's claim filter, the counter's increment and the token bucket's take and
guard appear in tests of every tier; each is spelled here so that the tests of one
behaviour use the same spec, and a change of its shape is one edit. They are plain
lists and dicts, as a DAG author writes them: the store and the parsers copy what
they are given, and a test that needs a variant builds a new list
(``[*PENDING, {...}]``) rather than changing one of these.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

#: One condition: the row's ``status`` is ``"pending"`` (a queue's claimable rows).
IS_PENDING: dict[str, Any] = {"field": "status", "operator": "equals", "value": "pending"}
#: A queue's claim filter.
PENDING: list[dict[str, Any]] = [IS_PENDING]
#: The rows a claim marked and nobody has finished (the stale-claim pass's filter).
IN_FLIGHT: list[dict[str, Any]] = [{"field": "status", "operator": "equals", "value": "in_flight"}]
#: "Mark done": the mutation a worker applies to a row it finished.
SET_DONE: list[dict[str, Any]] = [{"field": "status", "operation": "set", "value": "done"}]
#: A counter's step: ``n`` plus one (a missing ``n`` starts from 0).
INCREMENT: list[dict[str, Any]] = [{"field": "n", "operation": "increment", "value": 1}]
#: A token bucket's guard and its take.
HAS_TOKENS: list[dict[str, Any]] = [{"field": "tokens", "operator": "gt", "value": 0}]
TAKE_TOKEN: list[dict[str, Any]] = [{"field": "tokens", "operation": "increment", "value": -1}]

#: DAG ``default_args`` for tasks retried at once (``dag.test()`` applies retries).
ONE_RETRY: dict[str, Any] = {"retries": 1, "retry_delay": timedelta(0)}
THREE_RETRIES: dict[str, Any] = {"retries": 3, "retry_delay": timedelta(0)}
