# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-long demo synth cdk-synth bench lint dist clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check functions infra punctual tests bench
	$(BIN)/mypy
	$(BIN)/python -m pytest

test-long: $(STAMP)
	PUNCTUAL_HYPOTHESIS=explore $(BIN)/python -m pytest -m long

lint: $(STAMP)
	$(BIN)/ruff check functions infra punctual tests bench

demo: $(STAMP)
	$(BIN)/punctual demo

# The cdk.json app, synthesized directly with Python (no CDK CLI needed): writes cdk.out/.
synth: $(STAMP)
	JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=1 $(BIN)/python -m infra.app

# The same through the CDK CLI (`npx aws-cdk synth`), installed locally in node_modules/ if missing.
node_modules/.bin/cdk:
	npm install --no-save --no-audit --no-fund aws-cdk

cdk-synth: $(STAMP) node_modules/.bin/cdk
	npx --no-install aws-cdk synth --quiet

# The benchmark: real handlers in virtual time vs cdk-scheduler and EventBridge Scheduler
# (docs/benchmark.md; written to a temporary directory, to bench/results/ with BENCH_ARGS=--publish).
# BENCH_ARGS=--quick for the CI-sized run.
bench: $(STAMP)
	$(BIN)/punctual bench $(BENCH_ARGS)

# The wheel and the sdist in dist/, checked: twine's metadata and README rendering checks, the file
# lists and the license (tests/packaging/check_dist.py), then the wheel installed alone (--no-deps
# --no-index: offline) in a fresh venv, which borrows its dependencies from .venv, must import
# punctual, its client, CLI and construct module from there and run `punctual --help`.
dist: $(STAMP)
	rm -rf dist build
	$(BIN)/python -m build --no-isolation --outdir dist .
	$(BIN)/twine check --strict dist/*
	$(BIN)/python -m tests.packaging.check_dist dist

clean:
	rm -rf $(VENV) cdk.out node_modules .pytest_cache .mypy_cache dist build
