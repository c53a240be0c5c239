# raydex task runner: `make test`, `make fuzz`, `make demo`, `make bench`, `make lint`.
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

.PHONY: install test fuzz demo bench lint clean

install: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[test,lint,profile]'
	touch $(STAMP)

# pytest's exit status is make's: 1 (failures) and 5 (no tests collected) both fail the target.
test: $(STAMP)
	$(BIN)/pytest

# The fuzz campaign at length: 100,000 bad REST/WS inputs (`make test` sends 10,000); set
# RAYDEX_FUZZ_INPUTS for more and RAYDEX_FUZZ_SEED to replay a failure's seed.
FUZZ_INPUTS ?= 100000
fuzz: $(STAMP)
	RAYDEX_FUZZ_INPUTS=$(FUZZ_INPUTS) $(BIN)/pytest tests/fuzz -q -s -p no:cacheprovider

demo: $(STAMP)
	$(BIN)/raydex demo

bench: $(STAMP)
	$(BIN)/raydex bench engine
	$(BIN)/raydex bench codecs
	$(BIN)/raydex bench apply
	$(BIN)/raydex bench signatures
	$(BIN)/raydex bench transport

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy $(PKG_DIRS)

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis
