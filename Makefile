# Magnetar: the two commands are `make run` and `make test`; everything else is a helper.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install java etcd run test test-fast lint fmt proto bench clean

# The compiled SEND path (protocol/_speedups) is built by the install, in place (-e): an edit of
# its source re-runs it.
$(STAMP): pyproject.toml setup.py $(wildcard protocol/_speedups.pyx protocol/*.pxi protocol/_crc32c.h)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark,plot]'
	@touch $(STAMP)

install: $(STAMP)

## run: start the broker on the embedded defaults (binary 6650, HTTP 8080, data in ./data)
run: install
	$(VENV)/bin/magnetar standalone

## java: the Spark connector's tests need a JVM (17+); install one when `java` is absent
java:
	@command -v java >/dev/null 2>&1 || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jre-headless; }

## etcd: the cluster-mode tests (tests/cluster/) start a real etcd; install it when absent
etcd:
	@command -v etcd >/dev/null 2>&1 || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq etcd-server; }

## test: install everything the suite needs, lint (ruff, mypy strict), then run the whole suite
test: install java etcd lint
	$(PY) -m pytest

test-fast: install
	$(PY) -m pytest -m 'not slow'

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

fmt: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

## proto: regenerate protocol/_pb from protocol/PulsarApi.proto
proto: install
	$(PY) -m protocol._generate

## bench: the suite of bench/README.md; installs the `bench` extra (pulsar-lite) first
bench: install etcd
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
	rm -f protocol/_speedups.c protocol/_speedups*.so
