# Every target installs what it needs first: on a fresh clone `make demo` and `make test` just work.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# Two test processes (tests/conftest.py gives each its share of the cores and keeps the SLURM and
# load tests off each other); XDIST= runs the suite in one process.
XDIST ?= -n 2 --dist loadgroup

.PHONY: install lock corpus lint format demo test test-fast ui bench bench-quick bench-deps slurm-start slurm-stop clean

install: $(VENV)/.installed

# requirements.lock: every package at the version this project is tested with (`make lock` writes it
# from pyproject.toml's ranges). torch==2.13.0 first: on these machines it is the CPU build on local
# disk (the lock names it 2.13.0+cpu); a bare `torch` would pull a multi-GB CUDA build. ablate itself
# goes in last, editable, with nothing more resolved.
# pip's output goes to .venv/install.log (shown only if the install fails): a machine's pip
# configuration can make it warn about every package it looks up.
$(VENV)/.installed: pyproject.toml requirements.lock
	@echo "installing into $(VENV) (torch, MLflow, Hydra, ...; a few minutes the first time; log: $(VENV)/install.log)"
	@python3 -m venv $(VENV)
	@( $(PY) -m pip install -q --disable-pip-version-check --upgrade pip \
	  && $(PY) -m pip install -q --disable-pip-version-check torch==2.13.0 \
	  && $(PY) -m pip install -q --disable-pip-version-check -r requirements.lock \
	  && $(PY) -m pip install -q --disable-pip-version-check --no-deps -e . ) > $(VENV)/install.log 2>&1 \
	  || { tail -n 30 $(VENV)/install.log; echo "error: the install failed (full log: $(VENV)/install.log)"; exit 1; }
	@touch $@

# The lock from pyproject.toml's ranges and extras (dev, fp8, postgres, dashboard), keeping the versions it
# already pins where they still fit; torch held at the CPU build these machines install.
lock: $(VENV)/.installed
	@printf 'torch==2.13.0\n' > $(VENV)/torch-cpu.txt
	CUSTOM_COMPILE_COMMAND="make lock" $(VENV)/bin/pip-compile -q --extra dev --extra fp8 --extra postgres --extra dashboard \
	  --strip-extras --no-emit-index-url --no-emit-find-links -c $(VENV)/torch-cpu.txt -o requirements.lock pyproject.toml

# The real-text corpus of data=debian_docs: three Debian documentation packages (docs/data.md).
corpus:
	bash scripts/install_corpus.sh

# The precision policies on one small model, 3 seeds each, two runs at a time
# (src/ablate/conf/sweep/precision.yaml); ends with the table, each policy's loss difference
# against fp32 with its 95% interval over the seeds, the plots and where to look next. DEMO_ARGS
# adds overrides (e.g. DEMO_ARGS=train.steps=400).
# It installs only what the demo runs: ablate with torchao (its fp8 arms), at the lock's versions,
# without the tests' and linters' tools (`make install` adds them).
DEMO_ARGS ?=
demo: $(VENV)/.demo-installed
	@$(PY) -m ablate +sweep=precision $(DEMO_ARGS)

$(VENV)/.demo-installed: pyproject.toml requirements.lock
	@echo "installing what the demo needs into $(VENV) (torch, MLflow, Hydra, torchao; a few minutes the first time; log: $(VENV)/install.log)"
	@python3 -m venv $(VENV)
	@( $(PY) -m pip install -q --disable-pip-version-check --upgrade pip \
	  && $(PY) -m pip install -q --disable-pip-version-check torch==2.13.0 \
	  && $(PY) -m pip install -q --disable-pip-version-check -c requirements.lock -e '.[fp8]' ) > $(VENV)/install.log 2>&1 \
	  || { tail -n 30 $(VENV)/install.log; echo "error: the install failed (full log: $(VENV)/install.log)"; exit 1; }
	@touch $@

# Starts the services the tests use (a local SLURM cluster), then runs every test, the 25 slowest
# listed last; a test whose service is missing fails here (ABLATE_REQUIRE_SERVICES=1) instead of skipping.
test: install lint corpus
	bash scripts/install_test_deps.sh
	bash scripts/slurm_cluster.sh start
	ABLATE_WRITE_RELIABILITY=1 ABLATE_REQUIRE_SERVICES=1 $(PY) -m pytest $(XDIST) --durations=25 $(PYTEST_ARGS)

# ruff keeps the style (pyproject.toml [tool.ruff]), `make format` applies it; mypy checks the types of
# config/, scaling/ and plan/ (pyproject.toml [tool.mypy]).
lint: install
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy

format: install
	$(VENV)/bin/ruff check --fix src tests benchmarks
	$(VENV)/bin/ruff format src tests benchmarks

test-fast: install
	$(PY) -m pytest -m "not slow and not slurm" $(XDIST) $(PYTEST_ARGS)

ui: install
	$(PY) -m ablate ui --store $(CURDIR)/mlflow.db

# The recorded figures (benchmarks/results/*.json), each benchmark printing its table: run it on a
# quiet machine (about an hour on 2 cores). bench-quick checks the same code paths at small scale
# in minutes (benchmarks/results/quick/).
bench: bench-deps
	$(PY) benchmarks/bench_train.py
	$(PY) benchmarks/bench_sweep.py
	$(PY) benchmarks/bench_fit.py
	$(PY) benchmarks/bench_backtest.py
	$(PY) benchmarks/bench_widths.py
	$(PY) benchmarks/bench_search.py --anchor
	$(PY) benchmarks/bench_decode.py

bench-quick: bench-deps
	$(PY) benchmarks/bench_train.py --quick
	$(PY) benchmarks/bench_sweep.py --quick
	$(PY) benchmarks/bench_decode.py --quick

bench-deps: $(VENV)/.bench-installed

$(VENV)/.bench-installed: $(VENV)/.installed
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev,bench]'
	touch $@

slurm-start:
	bash scripts/slurm_cluster.sh start

slurm-stop:
	bash scripts/slurm_cluster.sh stop

clean:
	rm -rf outputs multirun .ablate mlflow.db mlartifacts exports .pytest_cache
