"""A store option that the URL's backend cannot honour is a SpecError, never dropped."""

from __future__ import annotations

import pytest

from airflow_atomic_store import AtomicStore, SpecError

#: Per backend: each option it cannot honour, a value, and the option the error points to.
REFUSED = {
    "sqlite": [
        ("lock_timeout", 5, "busy_timeout"),
        ("statement_timeout", 5, "busy_timeout"),
        ("notify", "writes", "poll_interval"),
        ("notify", "off", "poll_interval"),
    ],
    "postgres": [("busy_timeout", 5, "lock_timeout")],
}
#: Per backend: the options it honours, given together.
HONOURED = {
    "sqlite": {"busy_timeout": 5, "receipt_retention": 60},
    "postgres": {
        "lock_timeout": 5,
        "statement_timeout": 30,
        "notify": "all",
        "receipt_retention": 60,
    },
}
BACKEND_NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


def test_an_option_the_backend_cannot_honour_names_the_backend_and_what_to_use(
    backend: str, unreachable_url: str
) -> None:
    """Raised before any I/O: the URL points at no database at all."""
    for option, value, instead in REFUSED[backend]:
        with pytest.raises(SpecError) as raised:
            AtomicStore(unreachable_url, **{option: value})  # type: ignore[arg-type]
        assert raised.value.field == option
        assert BACKEND_NAMES[backend] in str(raised.value)
        assert instead in str(raised.value)


def test_the_options_a_backend_honours_open_a_working_store(store_url: str, backend: str) -> None:
    with AtomicStore(store_url, **HONOURED[backend]) as store:  # type: ignore[arg-type]
        store.put("t", "k", {"n": 1})
        updated = store.atomic_update(
            "t", "k", mutations=[{"field": "n", "operation": "increment", "value": 1}]
        )
        assert updated["value"] == {"n": 2}


def test_options_left_unset_are_never_refused(store_url: str) -> None:
    with AtomicStore(
        store_url, lock_timeout=None, statement_timeout=None, busy_timeout=None, notify=None
    ) as store:
        store.put("t", "k", {"n": 1})
        assert store.get("t", "k") == {"n": 1}


def test_a_bad_notify_mode_is_named_as_such_on_every_backend(unreachable_url: str) -> None:
    with pytest.raises(SpecError) as raised:
        AtomicStore(unreachable_url, notify="sometimes")
    assert raised.value.field == "notify"
    assert "must be one of" in str(raised.value)


#: Timeout values PostgreSQL cannot take, or would take as something else: they used to
#: fail at the first call (a bare ValueError, an OverflowError, a server error).
BAD_TIMEOUTS = [float("nan"), float("inf"), -1, 0, True, "5", 2_147_484, [5]]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("option", ["lock_timeout", "statement_timeout"])
@pytest.mark.parametrize("value", BAD_TIMEOUTS, ids=repr)
def test_a_bad_postgres_timeout_is_a_spec_error_naming_it_before_any_io(
    unreachable_url: str, option: str, value: object
) -> None:
    """Through the URL and through a connection factory (the hook's way) alike."""

    def connect() -> None:
        raise AssertionError("connected before judging the options")

    with pytest.raises(SpecError) as raised:
        AtomicStore(unreachable_url, **{option: value})  # type: ignore[arg-type]
    assert raised.value.field == option
    assert "positive number of seconds" in str(raised.value)
    with pytest.raises(SpecError) as raised:
        AtomicStore.from_connection_factory("postgresql", connect, **{option: value})  # type: ignore[arg-type]
    assert raised.value.field == option


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_sub_millisecond_postgres_timeout_rounds_up_to_one_millisecond(store_url: str) -> None:
    """0 ms is no timeout at all to PostgreSQL: a tiny timeout used to become none."""
    with AtomicStore(store_url, lock_timeout=0.0004, statement_timeout=2.0001) as store:
        store.put("t", "k", {"n": 1})
        with store._backend._cursor() as cursor:  # type: ignore[attr-defined]
            shown = cursor.execute(
                "SELECT current_setting('lock_timeout'), current_setting('statement_timeout')"
            ).fetchone()
    assert shown == ("1ms", "2s")


@pytest.mark.parametrize("value", [False, True])
def test_auto_claim_sets_is_still_accepted_with_a_deprecation_and_changes_nothing(
    store_url: str, value: bool
) -> None:
    """Claims no longer build sets (0.1.0): the argument stays accepted, and checked."""
    with pytest.warns(DeprecationWarning, match="auto_claim_sets"):
        store = AtomicStore(store_url, auto_claim_sets=value)
    with store:
        store.put("t", "k", {"status": "pending"})
        assert (
            store.atomic_claim(
                "t", where=[{"field": "status", "operator": "equals", "value": "pending"}]
            )["count"]
            == 1
        )
        assert [s["origin"] for s in store.claim_sets()] == ["declared"]  # the schema's own
    with pytest.raises(SpecError, match="auto_claim_sets"):
        AtomicStore(store_url, auto_claim_sets="yes")  # type: ignore[arg-type]
