# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-long demo synth bench lint clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

test-long: $(STAMP)
	$(BIN)/python -m pytest -m long

lint: $(STAMP)
	$(BIN)/ruff check functions infra punctual tests

demo: $(STAMP)
	$(BIN)/punctual demo

clean:
	rm -rf $(VENV) cdk.out .pytest_cache
