"""Store URLs: credentials read as the user meant them, passwords never shown."""

from __future__ import annotations

import pytest

from airflow_atomic_store import AtomicStore, SpecError
from airflow_atomic_store.store.atomic_store import redact_url
from airflow_atomic_store.store.postgres.connection import parse_postgres_url, scrub


@pytest.mark.parametrize(
    ("url", "password", "dsn"),
    [
        ("postgresql://u:p@ss@h:5432/db", "p@ss", "postgresql://u:p%40ss@h:5432/db"),
        ("postgresql://u:p%40ss@h/db", "p@ss", "postgresql://u:p%40ss@h/db"),
        ("postgresql://u:p/s:s@h/db", "p/s:s", "postgresql://u:p%2Fs%3As@h/db"),
        ("postgresql://u:pa ss@h/db", "pa ss", "postgresql://u:pa%20ss@h/db"),
        ("postgresql://u:p%zz@h/db", "p%zz", "postgresql://u:p%25zz@h/db"),
        (
            "postgres://u@h/db?application_name=me@home",
            None,
            "postgresql://u@h/db?application_name=me@home",
        ),
        ("postgresql://h/db", None, "postgresql://h/db"),
        (
            "postgresql://u:s@h1:5432,h2:5433/db?sslmode=require",
            "s",
            "postgresql://u:s@h1:5432,h2:5433/db?sslmode=require",
        ),
    ],
)
def test_credentials_end_at_the_last_at_sign_and_are_encoded_for_libpq(
    url: str, password: str | None, dsn: str
) -> None:
    parsed = parse_postgres_url(url)
    assert (parsed.password, parsed.dsn) == (password, dsn)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:p@ss@127.0.0.1:1/db", "postgresql://u:***@127.0.0.1:1/db"),
        ("postgresql://u:p@ss@word@h/db", "postgresql://u:***@h/db"),
        ("mysql://u:se:cret@h/db", "mysql://u:***@h/db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("sqlite:////tmp/store.db", "sqlite:////tmp/store.db"),
    ],
)
def test_a_redacted_url_shows_no_part_of_its_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_an_unsupported_url_is_named_without_its_password() -> None:
    with pytest.raises(SpecError) as raised:
        AtomicStore("mysql://u:p@ss@127.0.0.1:1/db")
    assert "mysql://u:***@127.0.0.1:1/db" in str(raised.value)
    assert "ss@" not in str(raised.value) and "p@" not in str(raised.value)


def test_scrub_hides_a_secret_and_its_encoded_form() -> None:
    assert scrub("bad 'p@ss' and p%40ss", ("p@ss",)) == "bad '***' and ***"
    assert scrub("nothing to hide", ("",)) == "nothing to hide"
