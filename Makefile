# raydex task runner: `make test`, `make demo`, `make bench`, `make lint`.
#
# The first target run creates .venv (python3.11 -m venv) and installs the project editable with its
# test and lint extras; the stamp file .venv/.make-stamp makes that happen again only when
# pyproject.toml changes (or .venv is deleted).

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.make-stamp
# Folders installed as raydex.<folder>; mypy runs strict (pyproject.toml) on all of them.
PKG_DIRS := actors codecs cluster engine observability

.PHONY: install test demo bench lint clean

install: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[test,lint]'
	touch $(STAMP)

# pytest's exit status is make's: 1 (failures) and 5 (no tests collected) both fail the target.
test: $(STAMP)
	$(BIN)/pytest

demo: $(STAMP)
	$(BIN)/raydex demo

bench: $(STAMP)
	$(BIN)/raydex bench engine
	$(BIN)/raydex bench codecs
	$(BIN)/raydex bench signatures
	$(BIN)/raydex bench transport

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy $(PKG_DIRS)

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis
