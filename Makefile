# Developer entry points. Each of `run` and `test` works on its own on a fresh
# machine with nothing but Python 3.11+: the venv is created and the package
# (with its dev extras) installed on first use, and reinstalled only when
# pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help run test lint reference docs docs-serve clean

help:
	@echo "make run    - start everything locally (sluice up, embedded Redis + SQLite)"
	@echo "make test   - run the test suite (PYTEST_ARGS='...' to pass options)"
	@echo "make lint   - ruff check, ruff format --check, mypy"
	@echo "make reference - regenerate docs/reference/*.md from the code (commit them)"
	@echo "make docs   - build the documentation site into site/ (mkdocs build --strict)"
	@echo "make docs-serve - serve the documentation on http://127.0.0.1:8000 while you edit"
	@echo "make clean  - remove the venv and caches (keeps ./var, the local data)"

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "sluice needs Python 3.11+; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)

# The stamp, not the venv directory, carries the install's date: the directory's
# mtime changes whenever pip touches it.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --disable-pip-version-check -e '.[dev]'
	@touch $@

# The docs tools (the `docs` extra) go into the same venv, on their own stamp: `make
# docs` needs no test tools and `make test` no docs tools.
DOCS_STAMP := $(VENV)/.installed-docs
$(DOCS_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -e '.[docs]'
	@touch $@

run: $(STAMP)
	$(BIN)/sluice up

# One worker process per core, at most four (each starts its own PostgreSQL); `-n 0`
# in PYTEST_ARGS runs everything in this process.
# The suite waits on its servers and processes more than it computes: three workers on
# the 2-core reference machine take 15 minutes where two (one per core) took 18.
PYTEST_WORKERS ?= 3
test: $(STAMP)
	$(BIN)/pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check sluice tests tools
	$(BIN)/ruff format --check sluice tests tools
	$(BIN)/mypy

# The reference pages (configuration, CLI, events, metrics, HTTP API) are generated from
# the code; tests/unit/test_reference_docs.py fails when the committed ones differ.
reference: $(STAMP)
	$(BIN)/python -m tools.reference

# --strict: a broken link or anchor, a missing page, a page left out of the
# navigation fails the build (mkdocs.yml, `validation`).
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

docs-serve: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

clean:
	rm -rf $(VENV) site build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
	find . -path ./var -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
