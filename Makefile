# twopc developer commands (GNU make).  `make test` works from a clean clone on Debian.
SHELL := /bin/bash
.DEFAULT_GOAL := test

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

export PYSPARK_PYTHON := $(CURDIR)/$(VENV)/bin/python
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(VENV)/bin/python

# Re-install when the project metadata changes or a package's __init__.py appears
# (editable installs map the packages that existed at install time).
PKG_INITS := $(wildcard twopc/__init__.py sinks/__init__.py recovery/__init__.py faultinject/__init__.py)

.PHONY: venv redis test demo bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml $(PKG_INITS)
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -e '.[test]'
	@touch $@

redis:
	@if command -v redis-server >/dev/null 2>&1; then \
	  echo "redis-server: $$(command -v redis-server)"; \
	elif [ "$$(id -u)" = 0 ]; then \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server; \
	else \
	  echo "redis-server is not installed. Install it with:" >&2; \
	  echo "    sudo apt-get install -y redis-server" >&2; \
	  echo "or point the tests at a server: TWOPC_TEST_REDIS_URL=redis://host:port/0" >&2; \
	  exit 1; \
	fi

test: venv redis
	$(VPY) -m pytest $(PYTEST_ARGS)

demo: venv
	$(VPY) -m recovery.demo

bench: venv redis
	@if [ ! -e /usr/share/java/postgresql.jar ] && [ "$$(id -u)" = 0 ]; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y libpostgresql-jdbc-java || \
	  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y libpostgresql-jdbc-java) || true; \
	fi
	$(VPY) -m recovery.bench
	$(VPY) -m recovery.bench_redis

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis .mypy_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
