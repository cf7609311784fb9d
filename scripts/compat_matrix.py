"""The compatibility matrix: the built wheel on the newest patch of every Airflow 3 line.

Run with ``make compat``. For each line in :data:`LINES`:

1. a venv ``.compat/<line>/`` with Airflow installed from the line's pins
   (``compat/constraints-<line>.txt``: Airflow's own constraint files cannot be
   fetched here, so each pins Airflow and the few dependencies that break it,
   saying why) and the test tools (``compat/test-requirements.txt``); it is
   reused while those files are unchanged;
2. this project's wheel, built once per run, installed into it (never editable);
3. ``airflow providers list`` must show the provider;
4. the Airflow-layer and example-DAG tests, on SQLite and PostgreSQL, from a copy
   of ``tests/`` and ``example_dags/`` in a temporary directory with
   ``--import-mode=importlib``, so they import the installed wheel (the
   ``compat/installed_wheel.py`` plugin prints where from and fails otherwise).

Every line runs both tiers but what its ``deselect`` names, each with the reason the
table shows: on every line the example DAGs' overlap tests (they fork warm Airflow
workers to race DAG runs against each other, which tests the store's concurrency
rather than the line; ``make test`` runs them), and on older lines what they cannot
run. Lines run two at a time. The result table is printed and written to
``docs/compatibility.md``; the exit status is non-zero if any line failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
PINS = PROJECT / "compat"
WORK = PROJECT / ".compat"
REPORT = PROJECT / "docs" / "compatibility.md"
PG_SECTION = "<!-- pg-matrix:"  # where make pg-matrix's section of the page starts
TEST_REQUIREMENTS = PINS / "test-requirements.txt"
PACKAGES = ["apache-airflow", "apache-airflow-providers-postgres"]

TESTS = ["tests/airflow", "tests/example_dags"]
# Before 3.2, today's providers-standard reaches the branch operator through a deprecated
# alias in Airflow core; the warning is Airflow's own (the suite makes warnings errors).
# A -W message is a literal prefix.
OLD_BRANCH_ALIAS = "ignore:The `airflow.operators.branch.BaseBranchOperator`"


@dataclass(frozen=True)
class Line:
    name: str
    pytest_args: list[str] = field(default_factory=list)
    # test node id prefix -> why it does not run on this line (shown in the table)
    deselect: dict[str, str] = field(default_factory=dict)
    # installed with the wheel, under the pins: what a line's users add for a feature
    extras: tuple[str, ...] = ()

    @property
    def constraints(self) -> Path:
        return PINS / f"constraints-{self.name}.txt"

    @property
    def venv(self) -> Path:
        return WORK / self.name

    @property
    def airflow_version(self) -> str:
        for line in self.constraints.read_text().splitlines():
            if line.startswith("apache-airflow=="):
                return line.split("==", 1)[1].strip()
        raise SystemExit(f"{self.constraints} does not pin apache-airflow")


# Left out on every line, for CI's time (see the module docstring).
EVERY_LINE = {
    "tests/example_dags/test_when_runs_overlap.py": (
        "the overlap tests (warm Airflow workers racing DAG runs: the store's concurrency, "
        "not the line's; make test runs them)"
    ),
}
# What does not run before 3.3, and why:
BEFORE_3_3 = {
    **EVERY_LINE,
    "tests/airflow/test_state_store_example.py::test_the_docs_dag_claims_once": (
        "the Task State Store is Airflow 3.3's"
    ),
}
# What does not run before 3.2, and why:
RUNTIME_MANAGER = "airflow.sdk.providers_manager_runtime (the task-side providers manager) is 3.2+"
BUNDLE_DAG_BAG = (
    "the test loads the DAGs folder with BundleDagBag (airflow.dag_processing.dagbag, 3.2+)"
)
BEFORE_3_2 = {
    **BEFORE_3_3,
    "tests/airflow/test_provider.py::test_the_hook_serves_sqlite_connections": RUNTIME_MANAGER,
    "tests/airflow/test_provider.py::test_postgres_stays_with_the_postgres_provider": RUNTIME_MANAGER,
    "tests/example_dags/test_dags_folder.py::test_the_dag_processor_loads_every_example_dag_without_errors": (
        BUNDLE_DAG_BAG
    ),
}
# Before 3.2 the UI's connection form comes from the hook's WTForms fields, which Airflow's
# API server reads only when WTForms is installed (the FAB provider brings it): installed
# on those lines, so the form tests run there too.
FORM_FROM_THE_HOOK = ("wtforms",)

# Airflow 3.0's own BaseHook looks connections up through a path it deprecates itself.
OLD_CONNECTION_LOOKUP = "ignore:Using Connection.get_connection_from_secrets from"
LEAKED_BY_AIRFLOW_3_0 = (
    "3.0.6's in-process supervisor logs the MaskSecret message, password included, at "
    "debug level during dag.test() (Airflow's log, not this package's)"
)
ON_3_0 = {
    **BEFORE_3_2,
    "tests/airflow/test_dag_runs_failures.py::test_a_wrong_database_password_fails_at_once_without_showing_it": (
        LEAKED_BY_AIRFLOW_3_0
    ),
}

LINES = [
    Line("3.0", ["-W", OLD_BRANCH_ALIAS, "-W", OLD_CONNECTION_LOOKUP], ON_3_0, FORM_FROM_THE_HOOK),
    Line("3.1", ["-W", OLD_BRANCH_ALIAS], BEFORE_3_2, FORM_FROM_THE_HOOK),
    Line("3.2", deselect=BEFORE_3_3),
    Line("3.3", deselect=EVERY_LINE),
]
# A line whose tests take longer than this has hung (a DAG run waiting forever).
TEST_TIMEOUT = 20 * 60


@dataclass
class Result:
    line: Line
    ok: bool = False
    listed: bool = False
    summary: str = "not run"
    seconds: float = 0.0
    log: Path | None = None


_print_lock = threading.Lock()


def say(text: str) -> None:
    with _print_lock:
        print(text, flush=True)


def run(cmd: list[str], log: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``, appending its output to ``log``; the caller checks the return code."""
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(map(str, cmd))}\n")
        out.flush()
        try:
            return subprocess.run(
                cmd, stdout=out, stderr=subprocess.STDOUT, text=True, check=False, **kwargs
            )  # type: ignore[call-overload]
        except subprocess.TimeoutExpired as exc:
            out.write(f"\ntimed out after {exc.timeout} s\n")
            return subprocess.CompletedProcess(cmd, returncode=124)


def pins_digest(line: Line) -> str:
    digest = hashlib.sha256(sys.version.encode())
    for path in (line.constraints, TEST_REQUIREMENTS):
        digest.update(path.read_bytes())
    digest.update(" ".join(PACKAGES).encode())
    return digest.hexdigest()


def ensure_venv(line: Line, log: Path) -> None:
    """Create (or reuse, if its pins are unchanged) the line's venv with Airflow installed."""
    stamp = line.venv / ".pins.sha256"
    digest = pins_digest(line)
    if stamp.exists() and stamp.read_text() == digest:
        say(f"[{line.name}] reusing {line.venv.relative_to(PROJECT)} (pins unchanged)")
        return
    shutil.rmtree(line.venv, ignore_errors=True)
    say(f"[{line.name}] creating {line.venv.relative_to(PROJECT)}: Airflow {line.airflow_version}")
    base = getattr(sys, "_base_executable", sys.executable)
    steps = [
        [base, "-m", "venv", str(line.venv)],
        # --no-compile: byte-compiling all of Airflow costs more CPU than the tests use of it.
        [str(line.venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile",
         "--disable-pip-version-check", "-c", str(line.constraints),
         "-r", str(TEST_REQUIREMENTS), *PACKAGES],
    ]  # fmt: skip
    for cmd in steps:
        if run(cmd, log).returncode != 0:
            raise RuntimeError(f"installing Airflow {line.airflow_version} failed")
    stamp.write_text(digest)


def install_wheel(line: Line, wheel: Path, log: Path) -> None:
    pip = [str(line.venv / "bin" / "python"), "-m", "pip"]
    quiet = ["--quiet", "--disable-pip-version-check", "-c", str(line.constraints)]
    for cmd in (
        [*pip, "install", *quiet, "--force-reinstall", "--no-deps", str(wheel)],
        # any dependency the wheel adds, and the line's extras, under the pins
        [*pip, "install", *quiet, str(wheel), *line.extras],
        [*pip, "check"],
    ):
        if run(cmd, log).returncode != 0:
            raise RuntimeError(f"installing the wheel failed: {' '.join(cmd[3:5])}")


def providers_list(line: Line, home: Path, log: Path) -> bool:
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    cmd = [str(line.venv / "bin" / "airflow"), "providers", "list", "--output", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    if proc.returncode != 0:
        return False
    # Log lines and warnings may surround the JSON.
    start = proc.stdout.find("[{")
    try:
        listed = json.JSONDecoder().raw_decode(proc.stdout, start)[0] if start >= 0 else []
    except ValueError:
        return False
    return any(entry.get("package_name") == "airflow-atomic-store" for entry in listed)


def copy_tests(into: Path) -> None:
    # devkit: the harness the tests import; docs: pages whose examples a test runs
    for name in ("tests", "devkit", "example_dags", "docs"):
        shutil.copytree(PROJECT / name, into / name, ignore=shutil.ignore_patterns("__pycache__"))
    # pytest's settings (markers, warnings as errors) without the project around them.
    shutil.copy(PROJECT / "pyproject.toml", into / "pyproject.toml")


def run_tests(line: Line, here: Path, log: Path) -> tuple[int, str]:
    python = str(line.venv / "bin" / "python")
    where = subprocess.run(
        [python, "-c", "import airflow_atomic_store; print(airflow_atomic_store.__file__)"],
        capture_output=True, text=True, cwd=here, check=False,
    )  # fmt: skip
    say(f"[{line.name}] airflow_atomic_store imports from {where.stdout.strip() or where.stderr}")
    cmd = [
        python, "-m", "pytest", "--import-mode=importlib", "-p", "no:cacheprovider",
        "-p", "installed_wheel", "-q", "-rfE", *line.pytest_args,
        # The tests use no anyio marker; an older pinned anyio's plugin warns under pytest 9.
        "-p", "no:anyio",
    ]  # fmt: skip
    for node in line.deselect:
        cmd += ["--deselect", node]
    cmd += TESTS
    env = {**os.environ, "PYTHONPATH": str(PINS), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = run(cmd, log, cwd=here, env=env, timeout=TEST_TIMEOUT)
    tail = [t for t in log.read_text().splitlines()[-40:] if t.strip()]
    summary = next((t.strip("= ") for t in reversed(tail) if " in " in t and "passed" in t), "")
    backends = [t.strip() for t in tail if t.strip().startswith(("sqlite:", "postgres:"))]
    # Without the duration, so the docs page changes only when results do.
    summary = re.sub(r" in [\d.]+s( \([\d:]+\))?", "", summary)
    text = summary or (tail[-1] if tail else "no output")
    if backends:
        text += " (" + "; ".join(backends) + ")"
    return proc.returncode, text


def check_line(line: Line, wheel: Path, test_slots: threading.Semaphore) -> Result:
    result = Result(line)
    started = time.monotonic()
    log = WORK / f"{line.name}.log"
    log.write_text(f"Airflow {line.airflow_version}\n")
    result.log = log
    try:
        ensure_venv(line, log)
        install_wheel(line, wheel, log)
        with tempfile.TemporaryDirectory(prefix=f"compat-{line.name}-") as tmp:
            here = Path(tmp)
            result.listed = providers_list(line, here / "home", log)
            say(f"[{line.name}] airflow providers list shows the provider: {result.listed}")
            copy_tests(here)
            with test_slots:
                say(f"[{line.name}] running {' '.join(TESTS)}")
                code, result.summary = run_tests(line, here, log)
        # 5: no tests collected, which is not a failure
        result.ok = result.listed and code in (0, 5)
    except RuntimeError as exc:
        result.summary = str(exc)
    result.seconds = time.monotonic() - started
    say(f"[{line.name}] {'ok' if result.ok else 'FAILED'}: {result.summary} (log: {log})")
    return result


def build_wheel(log: Path) -> Path:
    dist = WORK / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
           "--no-deps", "-w", str(dist), str(PROJECT)]  # fmt: skip
    if run(cmd, log).returncode != 0:
        raise SystemExit(f"building the wheel failed; see {log}")
    (wheel,) = dist.glob("airflow_atomic_store-*.whl")
    return wheel


def table(results: list[Result]) -> list[str]:
    rows = [
        "| Airflow line | tested version | pins | provider listed | tests | not run here | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        pins = [
            t.split("==")[0]
            for t in r.line.constraints.read_text().splitlines()
            if t and not t.startswith(("#", "apache-airflow=="))
        ]
        rows.append(
            f"| {r.line.name} | {r.line.airflow_version} | {', '.join(pins) or 'none'} | "
            f"{'yes' if r.listed else 'no'} | {r.summary} | "
            f"{'; '.join(sorted(set(r.line.deselect.values()))) or '-'} | "
            f"{'pass' if r.ok else 'FAIL'} |"
        )
    return rows


#: What differs between lines for the Airflow UI pages (tests/airflow/test_ui_*.py, every line).
UI_NOTE = (
    "The Airflow UI pages (see [Observing the store](observing.md)) differ between lines: "
    "the server-rendered page (`/atomic-store/` on the API server) is mounted on every line. "
    "From 3.1 the UI also renders the native page (Browse → Atomic Store) and a task "
    "instance's Atomic Store tab (plugin `react_apps`), with the host's Chakra UI from 3.2 "
    "(on 3.1, which hands plugins React only, plain elements in the theme's colours), and "
    "lists the server-rendered page as Browse → Atomic Store (HTML) (`external_views`); on "
    "3.0 there are no plugin navigation entries or React apps: the server-rendered page is "
    "reached by its URL."
)


def write_report(rows: list[str], wheel: Path) -> None:
    # The page's PostgreSQL section is make pg-matrix's (scripts/pg_matrix.py): kept as it is.
    page = REPORT.read_text() if REPORT.exists() else ""
    kept = page[page.find(PG_SECTION) :] if PG_SECTION in page else ""
    REPORT.write_text(
        "# Compatibility\n\n"
        "<!-- Generated by `make compat` (scripts/compat_matrix.py); do not edit. -->\n\n"
        f"The wheel `{wheel.name}`, installed (not editable) into one venv per Airflow 3 line "
        "with that line's newest patch, passes these Airflow-layer and example-DAG tests on "
        "SQLite and PostgreSQL. The pins, and why each is needed, are in `compat/`. The "
        "last column says which tests a line does not run, and why."
        "\n\n" + "\n".join(rows) + "\n\n" + UI_NOTE + "\n" + (f"\n{kept}" if kept else "")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("lines", nargs="*", help="lines to run (default: all), e.g. 3.2")
    parser.add_argument("--jobs", type=int, default=2, help="lines whose tests run at once")
    parser.add_argument("--no-report", action="store_true", help="do not write the docs page")
    args = parser.parse_args()
    lines = [line for line in LINES if not args.lines or line.name in args.lines]
    if not lines:
        parser.error(f"no such line; there are {[line.name for line in LINES]}")
    WORK.mkdir(exist_ok=True)
    started = time.monotonic()
    wheel = build_wheel(WORK / "build.log")
    say(f"built {wheel.relative_to(PROJECT)}")
    slots = threading.Semaphore(args.jobs)
    # Installs overlap freely (mostly downloads); the test runs share `--jobs` slots.
    with ThreadPoolExecutor(max_workers=len(lines)) as pool:
        results = list(pool.map(lambda line: check_line(line, wheel, slots), lines))
    rows = table(results)
    print("\n" + "\n".join(rows))
    print(f"\ncompatibility matrix: {time.monotonic() - started:.0f} s")
    if not args.no_report and not args.lines:
        write_report(rows, wheel)
        print(f"written to {REPORT.relative_to(PROJECT)}")
    failed = [r.line.name for r in results if not r.ok]
    if failed:
        print(f"FAILED on Airflow {', '.join(failed)}; logs in {WORK.relative_to(PROJECT)}/")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
