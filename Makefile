# raydex task runner: `make test`, `make fuzz`, `make demo`, `make bench`, `make lint`.
#
# The first target run creates .venv (python3.11 -m venv) and installs the project editable with its
# test, lint, profile and sdk extras; the stamp file .venv/.make-stamp makes that happen again only
# when pyproject.toml changes (or .venv is deleted).
#
# The engine is then compiled with mypyc (RAYDEX_MYPYC=auto, see setup.py): engine/*.so beside the
# sources, rebuilt whenever an engine source is newer than .venv/.engine-stamp (test, bench and demo
# depend on it). Where mypyc or a C compiler is missing the pure-Python engine is used (same
# behaviour, same state hash). Cost: about a minute of compile on an idle core. `make pure` removes
# the compiled modules (pure Python until the next engine edit or `make engine`).

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.make-stamp
ENGINE_STAMP := $(VENV)/.engine-stamp
# The same build compiles the C extensions (codecs/signing/_ecgfp5.c, codecs/_blockdec.c,
# actors/_smt.c, actors/replica/cache/_cacheloop.c, actors/replica/ws/_bookjson.c,
# observability/_untrack.c, cluster/_hugearena.c): an edit of one rebuilds too, or an existing .venv
# would keep the old one.
ENGINE_SRC := $(wildcard engine/*.py) $(wildcard engine/*.c) $(wildcard codecs/*.c) \
	$(wildcard codecs/signing/*.c) \
	$(wildcard actors/*.c) $(wildcard actors/replica/*/*.c) \
	$(wildcard observability/*.c) $(wildcard cluster/*.c) setup.py
# Folders installed as raydex.<folder>; mypy runs strict (pyproject.toml) on all of them.
PKG_DIRS := actors codecs cluster engine observability

# The engine benchmark's floors, compiled by the same build as the engine (setup.py) so the
# benchmark compares like with like: an edit rebuilds them, `make pure` removes them with it.
FLOORS_SRC := observability/bench/floors.py

.PHONY: install engine pure test fuzz demo bench lint clean

install: $(STAMP) $(ENGINE_STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[test,lint,profile,sdk]'
	touch $(STAMP)

$(ENGINE_STAMP): $(STAMP) $(ENGINE_SRC) $(FLOORS_SRC)
	RAYDEX_MYPYC=auto $(BIN)/python -m pip install --no-deps --no-build-isolation -e .
	$(BIN)/python -c "import raydex.engine as e; print('raydex engine compiled:', e.COMPILED)"
	touch $(ENGINE_STAMP)

engine: $(STAMP)
	rm -f $(ENGINE_STAMP)
	$(MAKE) $(ENGINE_STAMP)

pure: $(STAMP)
	rm -f engine/*.so observability/bench/*.so
	touch $(ENGINE_STAMP)

# pytest's exit status is make's: 1 (failures) and 5 (no tests collected) both fail the target.
test: $(STAMP) $(ENGINE_STAMP)
	$(BIN)/pytest

# The fuzz campaign at length: 100,000 bad REST/WS inputs (`make test` sends 10,000); set
# RAYDEX_FUZZ_INPUTS for more and RAYDEX_FUZZ_SEED to replay a failure's seed.
FUZZ_INPUTS ?= 100000
fuzz: $(STAMP) $(ENGINE_STAMP)
	RAYDEX_FUZZ_INPUTS=$(FUZZ_INPUTS) $(BIN)/pytest tests/fuzz -q -s -p no:cacheprovider

demo: $(STAMP) $(ENGINE_STAMP)
	$(BIN)/raydex demo

bench: $(STAMP) $(ENGINE_STAMP)
	$(BIN)/raydex bench engine
	$(BIN)/raydex bench codecs
	$(BIN)/raydex bench apply
	$(BIN)/raydex bench signatures
	$(BIN)/raydex bench transport
	$(BIN)/raydex bench wal
	$(BIN)/raydex bench sequencer

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy $(PKG_DIRS)

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis engine/*.so \
		observability/bench/*.so
