"""``airflow atomic-store …`` (Airflow 3.2+): the same commands, handed to Airflow's CLI.

Named in provider-info ``"cli"`` (``get_provider_info.py``); Airflow 3.2 and
later call :func:`get_cli_commands` while building ``airflow``'s parser (older
lines ignore the key, and ``python -m airflow_atomic_store`` works on all of
them). Arguments come from the same declarations as the standalone parser.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from airflow_atomic_store.cli.arguments import COMMANDS

GROUP = "atomic-store"


def get_cli_commands() -> list[Any]:
    from airflow.cli.cli_config import ActionCommand, Arg, GroupCommand

    subcommands = [
        ActionCommand(
            name=spec.name,
            help=spec.help,
            func=_entry(spec.name),
            args=tuple(Arg(argument.flags, **argument.options) for argument in spec.arguments),
            description=spec.help,
        )
        for spec in COMMANDS
    ]
    return [
        GroupCommand(
            name=GROUP,
            help="Look at an atomic store: tables, queue counts, claims, leases (read-only); "
            "migrate its schema",
            subcommands=subcommands,
            epilog="exit codes: 0 ok, 1 found stale claims, 2 bad command line or filter, "
            "3 store unreachable or missing, 4 unexpected error",
        )
    ]


def _entry(command: str) -> Callable[[argparse.Namespace], None]:
    def run_command(args: argparse.Namespace) -> None:
        from airflow_atomic_store.cli.main import run

        code = run(args, command, prog=f"airflow {GROUP} {command}")
        if code:
            raise SystemExit(code)

    run_command.__name__ = f"atomic_store_{command.replace('-', '_')}"
    return run_command
