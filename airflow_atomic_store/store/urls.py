"""Store URLs: reading the credentials in one, and keeping its password out of messages.

An error message never shows a password, whole or in part. libpq echoes parts of a
URL it cannot parse: with an unencoded ``@`` in the password
(``postgresql://u:p@ss@host/db``) it splits at the first ``@`` and reports the host
``'ss@host'``; a space or a bad ``%`` escape in the password comes back quoted. So
the store reads the credentials itself, the way Python's ``urllib`` and Airflow's
connection URIs do (they end at the last ``@`` of the authority), and hands libpq
a URL whose user and password are percent-encoded. The password it read is then
scrubbed from any message the driver writes.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

__all__ = ["PostgresUrl", "parse_postgres_url", "redact_url", "scrub"]

#: Where a URL's query starts: a ``?`` followed by a parameter name and ``=``.
_QUERY = re.compile(r"\?[A-Za-z_][A-Za-z0-9_]*=")
_HIDDEN = "***"


class PostgresUrl:
    """A PostgreSQL URL made safe for libpq, and the password it holds (if any)."""

    def __init__(self, dsn: str, password: str | None) -> None:
        self.dsn = dsn
        self.password = password


def _split(url: str) -> tuple[str, str, str] | None:
    """``(scheme, userinfo, rest)`` of a URL with credentials, else None.

    The userinfo ends at the last ``@`` before the query string, so an unencoded
    ``@`` (or ``/``, ``:``) in the password stays in the password.
    """
    if "://" not in url:
        return None
    scheme, tail = url.split("://", 1)
    query = _QUERY.search(tail)
    head = tail if query is None else tail[: query.start()]
    at = head.rfind("@")
    if at < 0:
        return None
    return scheme, tail[:at], tail[at + 1 :]


def parse_postgres_url(url: str) -> PostgresUrl:
    """``postgresql://…`` with its user and password percent-encoded for libpq."""
    parts = _split(url)
    if parts is None:
        return PostgresUrl("postgresql://" + url.split("://", 1)[-1], None)
    _, userinfo, rest = parts
    user, has_password, password = userinfo.partition(":")
    # Decode first: a password already encoded (p%40ss) stays the same password.
    credentials = quote(unquote(user), safe="")
    secret = unquote(password) if has_password else None
    if secret is not None:
        credentials += ":" + quote(secret, safe="")
    return PostgresUrl(f"postgresql://{credentials}@{rest}", secret)


def redact_url(url: str) -> str:
    """The URL with its password replaced by ``***`` (for messages)."""
    if "://" not in url or "@" not in url:
        return url
    scheme, tail = url.split("://", 1)
    # The last "@" anywhere: whatever precedes it may be a password, and is hidden.
    userinfo, _, rest = tail.rpartition("@")
    user, has_password, _ = userinfo.partition(":")
    return f"{scheme}://{user}:{_HIDDEN}@{rest}" if has_password else url


def scrub(message: str, secrets: tuple[str, ...]) -> str:
    """``message`` with every secret (and its percent-encoded form) replaced by ``***``."""
    for secret in secrets:
        for form in {secret, quote(secret, safe="")}:
            if form:
                message = message.replace(form, _HIDDEN)
    return message
