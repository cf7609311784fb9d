"""``StoreInspector.task_instance``: what one task instance did with a store, on both backends.

The UI's "Atomic Store" tab of a task instance shows this view. A task instance's
keyed calls are found by their idempotency receipts (the operators key each call by
``{dag_id}/{run_id}/{task_id}/{map_index}``), its claims' rows as they stand now,
and the rows its DAG run holds (``claimedBy`` or a lease's ``holder`` is the run's
execution id ``{dag_id}/{run_id}``). Reading it writes nothing.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_atomic_store import AtomicStore, SpecError
from airflow_atomic_store.inspection import StoreInspector, TaskRow, inspector
from airflow_atomic_store.timestamps import format_timestamp, utc_now
from tests.support.queue_state import dump

DAG, RUN = "queue_dispatcher", "manual__1"
RUN_ID = f"{DAG}/{RUN}"  # the execution id claims write as claimedBy
DRAIN_KEY = f"{RUN_ID}/drain/-1"  # the claim task's idempotency key


def _queue(store: AtomicStore, count: int = 6) -> None:
    for n in range(count):
        store.put("jobs", f"job-{n}", {"status": "pending", "n": n})


def _drain(store: AtomicStore, limit: int = 4) -> list[str]:
    claimed = store.atomic_claim(
        "jobs", limit=limit, execution_id=RUN_ID, idempotency_key=DRAIN_KEY
    )
    return [row["key"] for row in claimed["claimed"]]


def _set(store: AtomicStore, key: str, **fields: object) -> None:
    mutations = [{"field": name, "operation": "set", "value": v} for name, v in fields.items()]
    assert store.atomic_update("jobs", key, mutations=mutations)["updated"]


def test_a_claim_task_lists_its_receipt_and_where_each_row_it_claimed_stands_now(
    store: AtomicStore,
) -> None:
    _queue(store)
    keys = _drain(store)
    assert keys == ["job-0", "job-1", "job-2", "job-3"]
    _set(store, "job-0", status="done")  # finished by its process task
    _set(store, "job-1", status="pending")  # handed back when its task failed
    _set(store, "job-2", claimedBy="stale_claim_recovery/run-9")  # re-claimed by recovery

    view = StoreInspector(store).task_instance(DAG, RUN, "drain")

    assert view.used and view.task_key == DRAIN_KEY and view.execution_id == RUN_ID
    (receipt,) = view.receipts
    assert (receipt.key, receipt.step, receipt.primitive, receipt.table) == (
        DRAIN_KEY,
        None,
        "claim",
        "jobs",
    )
    assert receipt.claimed == tuple(keys) and receipt.outcome == "claimed 4"
    assert receipt.replayed is None  # no start time given: unknown
    states = {row.key: row.state for row in view.claimed}
    assert states == {
        "job-0": "finished",
        "job-1": "handed_back",
        "job-2": "gone",
        "job-3": "held",
    }
    held = next(row for row in view.claimed if row.key == "job-3")
    assert held.status == "in_flight" and held.claimed_at is not None
    assert view.run_rows == ()  # every row the run holds is one this task claimed


def test_a_delete_claim_shows_its_rows_deleted_and_bulk_calls_their_counts(
    store: AtomicStore,
) -> None:
    _queue(store)
    store.atomic_claim("jobs", limit=2, mode="delete", idempotency_key=DRAIN_KEY)
    items = [{"key": f"new-{n}", "insert_value": {"status": "pending"}} for n in range(3)]
    store.atomic_upsert_many("jobs", items, idempotency_key=f"{DRAIN_KEY}/enqueue")
    done = [{"field": "status", "operation": "set", "value": "done"}]
    store.atomic_update_many(
        "jobs", ["job-2", "job-3", "nowhere"], mutations=done, idempotency_key=f"{DRAIN_KEY}/finish"
    )

    view = StoreInspector(store).task_instance(DAG, RUN, "drain")

    assert [(r.primitive, r.step, r.target, r.outcome) for r in view.receipts] == [
        ("delete-claim", None, "", "claimed and deleted 2"),
        ("upsert_many", "enqueue", "", "inserted 3 rows"),
        ("update_many", "finish", "", "updated 2 rows"),
    ]
    assert [(row.key, row.state) for row in view.claimed] == [
        ("job-0", "deleted"),
        ("job-1", "deleted"),
    ]


def test_a_receipt_written_before_the_latest_try_started_was_replayed(store: AtomicStore) -> None:
    _queue(store)
    _drain(store)
    before, after = utc_now() - timedelta(hours=1), utc_now() + timedelta(hours=1)
    view = StoreInspector(store)
    (first_try,) = view.task_instance(DAG, RUN, "drain", started_at=before).receipts
    (retry,) = view.task_instance(DAG, RUN, "drain", started_at=after).receipts
    assert first_try.replayed is False and retry.replayed is True
    assert first_try.to_dict()["replayed"] is False


def test_a_task_instance_owns_its_key_and_its_steps_but_no_other_task_instance_key(
    store: AtomicStore,
) -> None:
    mine = f"{RUN_ID}/load/3"
    store.atomic_upsert("counters", "runs", insert_value={"n": 1}, idempotency_key=mine)
    store.atomic_upsert(
        "counters", "steps", insert_value={"n": 1}, idempotency_key=f"{mine}/second step"
    )
    for other in (f"{RUN_ID}/load/30", f"{RUN_ID}/load/-1", f"{RUN_ID}/loader/3", "other/key"):
        store.atomic_upsert("counters", other, insert_value={"n": 1}, idempotency_key=other)

    view = StoreInspector(store).task_instance(DAG, RUN, "load", 3)

    assert [(r.key, r.step, r.target, r.outcome) for r in view.receipts] == [
        (mine, None, "runs", "inserted"),
        (f"{mine}/second step", "second step", "steps", "inserted"),
    ]


def test_the_rows_its_run_holds_show_a_semaphore_slot_and_a_lease_with_their_fences(
    store: AtomicStore,
) -> None:
    ahead = format_timestamp(utc_now() + timedelta(minutes=5))
    store.put(
        "slots",
        "slot-1",
        {"status": "held", "claimedBy": RUN_ID, "claimedAt": "2026-01-01T00:00:00.000000Z"},
    )
    assert store.atomic_update(
        "slots", "slot-1", mutations=[{"field": "fence", "operation": "increment", "value": 7}]
    )["updated"]
    store.put("leases", "dispatcher", {"holder": RUN_ID, "expiresAt": ahead, "fence": 2})
    store.put("leases", "old", {"holder": RUN_ID, "expiresAt": "2020-01-01T00:00:00.000000Z"})
    store.put("slots", "slot-0", {"status": "held", "claimedBy": "other_dag/run", "fence": 1})

    view = StoreInspector(store).task_instance(DAG, RUN, "work")

    assert view.used and view.receipts == () and view.claimed == ()
    assert sorted(view.run_rows, key=lambda row: (row.table, row.key)) == [
        TaskRow("leases", "dispatcher", "held", None, None, 2, ahead),
        TaskRow("leases", "old", "expired", None, None, None, "2020-01-01T00:00:00.000000Z"),
        TaskRow("slots", "slot-1", "held", "held", "2026-01-01T00:00:00.000000Z", 7, None),
    ]


def test_a_task_that_did_not_use_the_store_is_said_to_be_so(store: AtomicStore) -> None:
    _queue(store)
    store.atomic_claim("jobs", limit=2, execution_id="another_dag/run", idempotency_key="x/y/z/-1")
    view = StoreInspector(store).task_instance(DAG, RUN, "drain")
    assert not view.used
    assert view.to_dict()["used"] is False and view.to_dict()["receipts"] == []


def test_limits_cut_the_lists_short_and_say_so(
    store: AtomicStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _queue(store)
    _drain(store)
    monkeypatch.setattr(inspector, "TASK_ROW_LIMIT", 2)
    view = StoreInspector(store).task_instance(DAG, RUN, "drain")
    assert view.truncated
    assert sum(row.state != "gone" for row in view.claimed) == 2


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        (("", RUN, "drain", -1), "dag_id"),
        ((DAG, None, "drain", -1), "run_id"),
        ((DAG, RUN, "a\x00b", -1), "task_id"),
        ((DAG, RUN, "drain", -2), "map_index"),
        ((DAG, RUN, "drain", True), "map_index"),
    ],
)
def test_a_bad_task_instance_is_refused_naming_the_field(
    store: AtomicStore, arguments: tuple[object, ...], field: str
) -> None:
    with pytest.raises(SpecError) as refused:
        StoreInspector(store).task_instance(*arguments)  # type: ignore[arg-type]
    assert refused.value.field == field


def test_an_unaware_start_time_is_refused(store: AtomicStore) -> None:
    with pytest.raises(SpecError) as refused:
        StoreInspector(store).task_instance(
            DAG, RUN, "drain", started_at=utc_now().replace(tzinfo=None)
        )
    assert refused.value.field == "started_at"


def test_reading_a_task_instance_changes_nothing(store: AtomicStore, store_url: str) -> None:
    _queue(store)
    _drain(store)
    before = dump(store_url)
    StoreInspector(store).task_instance(DAG, RUN, "drain", started_at=utc_now())
    assert dump(store_url) == before
