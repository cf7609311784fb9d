"""``python -m airflow_atomic_store``: parse, open the store, run one command, exit with a code.

Exit codes (the same for ``airflow atomic-store``):

* 0: done;
* 1: the command found what it looks for: ``stale`` found stale claims,
  ``stats --stale-after`` counted some;
* 2: the command line is wrong: an unknown option, bad JSON, a bad duration,
  a ``where`` the spec layer rejects (the message names the field);
* 3: the store could not be opened or read: unreachable, refused, missing
  (an Airflow connection or a SQLite file that does not exist), or failing;
* 4: an unexpected error (a bug: please report it with the traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

from airflow_atomic_store.cli.arguments import COMMANDS, URL_VARIABLE
from airflow_atomic_store.cli.commands import FOUND, HANDLERS, OK, UNREACHABLE, USAGE
from airflow_atomic_store.exceptions import AtomicStoreError, SpecError
from airflow_atomic_store.store import AtomicStore

__all__ = ["FOUND", "OK", "UNREACHABLE", "USAGE", "build_parser", "main", "run"]

PROG = "python -m airflow_atomic_store"
DEFAULT_CONN_ID = "atomic_store_default"
BUG = 4


class UsageError(Exception):
    """The arguments do not go together (exit 2)."""


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Look at an atomic store: tables, queue counts, claims, leases, buckets "
        "(read-only); migrate its schema (migrate).",
        epilog="exit codes: 0 ok, 1 found stale claims (stale, stats --stale-after), "
        "2 bad command line or filter, 3 store unreachable or missing, 4 unexpected error",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for spec in COMMANDS:
        sub = commands.add_parser(spec.name, help=spec.help, description=spec.help)
        for argument in spec.arguments:
            argument.add_to(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run(args, args.command)


def run(args: argparse.Namespace, command: str, prog: str = PROG) -> int:
    """Run ``command`` with parsed ``args``; print its output; return the exit code."""
    with logs_on_stderr():
        return _run(args, command, prog)


@contextlib.contextmanager
def logs_on_stderr() -> Iterator[None]:
    """Log handlers that write to stdout write to stderr while a command runs.

    stdout is the command's output (``--json`` is parsed by scripts), and Airflow's
    console handler writes to stdout: on 3.2, reading a connection from the metadata
    database logs alembic's plugin set-up there, ahead of the JSON.
    """
    stdout = (sys.stdout, sys.__stdout__)
    moved: list[tuple[logging.StreamHandler[Any], Any]] = []
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in getattr(logger, "handlers", ()):
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and stream in stdout:
                moved.append((handler, handler.setStream(sys.stderr)))
    try:
        yield
    finally:
        for handler, stream in moved:
            handler.setStream(stream)


def _run(args: argparse.Namespace, command: str, prog: str) -> int:
    try:
        store = open_store(args, read_only=next(c for c in COMMANDS if c.name == command).read_only)
    except (UsageError, SpecError) as exc:
        return _fail(prog, str(exc), USAGE)
    except AtomicStoreError as exc:
        return _fail(prog, str(exc), UNREACHABLE)
    except Exception:
        traceback.print_exc()
        return _fail(prog, "unexpected error opening the store (a bug; traceback above)", BUG)
    try:
        outcome = HANDLERS[command](store, args)
    except SpecError as exc:
        return _fail(prog, str(exc), USAGE)
    except AtomicStoreError as exc:
        return _fail(prog, str(exc), UNREACHABLE)
    except Exception:
        traceback.print_exc()
        return _fail(prog, "unexpected error (a bug; the traceback is above)", BUG)
    finally:
        store.close()
    if args.json:
        text = json.dumps(outcome.data, indent=2, ensure_ascii=False)
    else:
        text = "\n".join(outcome.lines)
    try:
        try:
            _write(text)
        except UnicodeEncodeError:  # a console that cannot show some key: escape, never fail
            _write(
                json.dumps(outcome.data, indent=2)
                if args.json
                else text.encode("ascii", "backslashreplace").decode("ascii")
            )
    except BrokenPipeError:  # piped into ``head``: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return outcome.code


def _write(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def open_store(args: argparse.Namespace, *, read_only: bool = True) -> AtomicStore:
    """From ``--url`` (or ``$ATOMIC_STORE_URL``), else from an Airflow connection.

    Read-only (every command but ``migrate``): a missing store is an error (exit 3),
    never created.
    """
    if args.url and args.conn_id:
        raise UsageError("give --url or --conn-id, not both")
    url = args.url or (None if args.conn_id else os.environ.get(URL_VARIABLE) or None)
    if url is not None:
        if args.storage_table:
            return AtomicStore(url, storage_table=args.storage_table, read_only=read_only)
        return AtomicStore(url, read_only=read_only)
    if args.storage_table:
        raise UsageError("--storage-table goes with --url; a connection sets it in its extra")
    # Airflow 3.0 sets up its logging on stdout when first imported (after
    # logs_on_stderr looked): what it prints meanwhile goes to stderr too.
    with contextlib.redirect_stdout(sys.stderr):
        try:
            from airflow_atomic_store.cli import airflow_connection
        except ImportError as exc:
            raise UsageError(
                f"--conn-id needs Airflow ({exc}); without Airflow give --url or ${URL_VARIABLE}"
            ) from None
        return airflow_connection.open_store(args.conn_id or DEFAULT_CONN_ID, read_only=read_only)


def _fail(prog: str, message: str, code: int) -> int:
    sys.stderr.write(f"{prog}: error: {message}\n")
    return code
