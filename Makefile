# Developer entry points. Each of `run` and `test` works on its own on a fresh
# machine with nothing but Python 3.11+: the venv is created and filled from the
# lock (requirements/dev.txt: every package pinned, with its hashes) on first use,
# and again whenever the lock or pyproject.toml changes. How the locks are made and
# when to remake them (`make lock`): docs/development/dependencies.md.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK := requirements/dev.txt
PYTEST_ARGS ?=
PIP := $(BIN)/python -m pip --disable-pip-version-check

.DEFAULT_GOAL := help
.PHONY: help run test lint reference docs docs-serve lowest lock upgrade check-lock clean

help:
	@echo "make run        - start everything locally (sluice up, embedded Redis + SQLite)"
	@echo "make test       - run the test suite (PYTEST_ARGS='...' to pass options)"
	@echo "make lint       - ruff check, ruff format --check, mypy, the import rules (lint-imports)"
	@echo "make docs       - build the documentation site into site/ (mkdocs build --strict)"
	@echo "make docs-serve - serve the documentation on http://127.0.0.1:8000 while you edit"
	@echo "make reference  - regenerate docs/reference/*.md from the code (commit them)"
	@echo "make lowest     - the tests marked 'lowest' on the lowest versions pyproject.toml allows"
	@echo "make lock       - rewrite requirements/*.txt after a change of pyproject.toml's dependencies"
	@echo "make upgrade    - every pin in requirements/*.txt to the newest release the ranges allow"
	@echo "                  (PACKAGE=name: only that one)"
	@echo "make clean      - remove the venvs and caches (keeps ./var, the local data)"

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "sluice needs Python 3.11+; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)

# The stamp, not the venv directory, carries the install's date: the directory's
# mtime changes whenever pip touches it. The lock installs with the venv's own pip (no
# unpinned upgrade of it first; --no-deps: it holds every package); sluice itself goes in editable and without
# dependencies, so nothing but the lock's pins is installed. `pip check` then finds a
# dependency that pyproject.toml names and the lock lacks (or pins out of its range):
# a lock not remade after an edit. It warns instead of failing, so that `make lock`,
# which needs this venv's uv, still runs. The editable install is setuptools' `compat`
# mode, a plain path in a .pth file: the default mode's import hook is code that mypy and
# other static checkers do not run, so an app's package outside this checkout could not
# find `sluice.app` (tests/integration/test_static_checkers.py). A change of this file
# installs again, so a venv made before it gets the mode too.
$(STAMP): $(LOCK) pyproject.toml Makefile | $(BIN)/python
	$(PIP) install --quiet --require-hashes --no-deps -r $(LOCK)
	$(PIP) install --quiet --no-deps -e . --config-settings editable_mode=compat
	@$(PIP) check >/dev/null 2>&1 || { $(PIP) check; \
		echo "WARNING: $(LOCK) does not match pyproject.toml: run 'make lock'" >&2; }
	@touch $@

run: $(STAMP)
	$(BIN)/sluice up

# One worker process per core, at most four (each starts its own PostgreSQL); `-n 0`
# in PYTEST_ARGS runs everything in this process.
# The suite waits on its servers and processes more than it computes: three workers on
# the 2-core reference machine take 15 minutes where two (one per core) took 18.
PYTEST_WORKERS ?= 3
# --dist loadgroup: the tests of one xdist_group run on one worker (the wheel test's
# module builds its wheel once for its tests); the others are spread as by default.
# Then the example app's own suite (examples/orders: its pyproject, its conftest), as an
# app's tests run on the public API and its testing plugin.
test: $(STAMP)
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)
	cd examples/orders && ../../$(BIN)/pytest -n 2 -q

# lint-imports: the layout's import rules ([tool.importlinter] in pyproject.toml; the
# layers and what they may import: docs/design/index.md).
lint: $(STAMP)
	$(BIN)/ruff check sluice tests tools
	$(BIN)/ruff format --check sluice tests tools
	$(BIN)/mypy
	$(BIN)/lint-imports
	cd examples/orders && ../../$(BIN)/ruff check . && ../../$(BIN)/ruff format --check .
	cd examples/orders && ../../$(BIN)/mypy

# The reference pages (configuration, CLI, events, metrics, HTTP API) are generated from
# the code; tests/unit/test_reference_docs.py fails when the committed ones differ.
reference: $(STAMP)
	$(BIN)/python -m tools.reference

# --strict: a broken link or anchor, a missing page, a page left out of the
# navigation fails the build (mkdocs.yml, `validation`).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

# The runtime dependencies at the lowest versions their ranges allow, in .venv-lowest,
# and the tests marked `lowest` on them (.ci/lowest says how).
lowest: $(STAMP)
	PYTHON=$(PYTHON) bash .ci/lowest $(PYTEST_ARGS)

# The locks: requirements/run.txt (what sluice needs to run: the wheel test and the
# image install it), requirements/dev.txt (every extra: the tests' tools and the docs',
# the one venv `make run`, `make test` and `make docs` use, one resolution), one per
# other extra of pyproject.toml (requirements/EXTRA.txt: sluice's dependencies and the
# extra's, such as a docs-only build's), and one per requirements/NAME.in (a set installed
# without sluice, such as the benchmark peers). Universal (any platform, Python 3.11
# and later) and hashed. `make lock` keeps every pin that still fits the ranges;
# `make upgrade` moves every pin to the newest release they allow, `make upgrade
# PACKAGE=name` only that package's (a security fix).
LOCK_DIR ?= requirements
COMPILE = $(BIN)/uv pip compile --quiet --universal --generate-hashes --python-version 3.11 \
	--custom-compile-command 'make lock' $(UPGRADE)
EXTRAS = $(BIN)/python -c 'import tomllib; \
	print(*tomllib.load(open("pyproject.toml", "rb"))["project"].get("optional-dependencies", {}))'

lock: $(STAMP)
	$(COMPILE) pyproject.toml -o $(LOCK_DIR)/run.txt
	$(COMPILE) pyproject.toml --all-extras -o $(LOCK_DIR)/dev.txt
	@for extra in $$($(EXTRAS)); do \
		[ "$$extra" != dev ] || continue; \
		echo "$(COMPILE) pyproject.toml --extra $$extra -o $(LOCK_DIR)/$$extra.txt"; \
		$(COMPILE) pyproject.toml --extra $$extra -o $(LOCK_DIR)/$$extra.txt || exit 1; \
	done
	@for input in requirements/*.in; do \
		[ -e "$$input" ] || continue; \
		output=$(LOCK_DIR)/$$(basename $$input .in).txt; \
		echo "$(COMPILE) $$input -o $$output"; \
		$(COMPILE) $$input -o $$output || exit 1; \
	done

upgrade: UPGRADE = $(if $(PACKAGE),--upgrade-package $(PACKAGE),--upgrade)
upgrade: lock

# CI: the locks hold what `make lock` would write now (.ci/check-lock).
check-lock: $(STAMP)
	bash .ci/check-lock

clean:
	rm -rf $(VENV) .venv-lowest site build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
	find . -path ./var -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
