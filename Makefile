# Every target installs what it needs first: on a fresh clone `make demo` and `make test` just work.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install demo test test-fast ui bench slurm-start slurm-stop clean

install: $(VENV)/.installed

# torch==2.13.0 first: on these machines it is the CPU build on local disk; a bare `torch`
# would pull a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

demo: install
	$(PY) -m ablate +sweep=precision

# Starts the services the tests use (a local SLURM cluster), then runs every test.
test: install
	bash scripts/install_test_deps.sh
	bash scripts/slurm_cluster.sh start
	ABLATE_WRITE_RELIABILITY=1 $(PY) -m pytest $(PYTEST_ARGS)

test-fast: install
	$(PY) -m pytest -m "not slow and not slurm" $(PYTEST_ARGS)

ui: install
	$(PY) -m ablate.ui --store $(CURDIR)/mlflow.db

bench: install
	$(PY) benchmarks/bench_train.py
	$(PY) benchmarks/bench_sweep.py
	$(PY) benchmarks/bench_fit.py

slurm-start:
	bash scripts/slurm_cluster.sh start

slurm-stop:
	bash scripts/slurm_cluster.sh stop

clean:
	rm -rf outputs multirun .ablate mlflow.db mlartifacts exports .pytest_cache
