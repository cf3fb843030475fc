# twopc developer commands (GNU make).  `make test` works from a clean clone on Debian.
SHELL := /bin/bash
.DEFAULT_GOAL := test

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
# Which tests `make test` runs: all but the `nightly` ones (long Spark crash matrices, see the
# README's Testing section); `make test-all` runs every test.
TEST_MARKERS ?= not nightly
# What `make lint` checks, and so what `make test` is gated on: every package and the tests.
# Narrow it for a run with `make lint LINT_PATHS="twopc tests"` (or the environment).
LINT_PATHS ?= twopc sinks recovery faultinject tests
# mypy reads sinks/, recovery/ and faultinject/ through twopc/ (they are twopc.sinks, ...).
MYPY_PATHS = $(sort $(patsubst sinks,twopc,$(patsubst recovery,twopc,$(patsubst faultinject,twopc,$(LINT_PATHS)))))

export PYSPARK_PYTHON := $(CURDIR)/$(VENV)/bin/python
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(VENV)/bin/python

# Re-install when the project metadata changes or a package's __init__.py appears
# (editable installs map the packages that existed at install time).
PKG_INITS := $(wildcard twopc/__init__.py sinks/__init__.py recovery/__init__.py recovery/demos/__init__.py \
                        faultinject/__init__.py)

.PHONY: venv redis mariadb promtool jdbc-driver lint docs test test-fast test-all chaos demo bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml $(PKG_INITS)
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -e '.[all,test,docs]'
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

# apt-get install $(1) without letting the package start its service: a policy-rc.d that answers
# 101 ("action forbidden") is put in place for the install when none exists, and the service $(2)
# is stopped and disabled should it run anyway.
apt_install_no_service = policy=/usr/sbin/policy-rc.d; own_policy=; \
	  if [ ! -e $$policy ]; then \
	    printf '\#!/bin/sh\n\# twopc make: no service starts during the install\nexit 101\n' > $$policy; \
	    chmod 755 $$policy; own_policy=1; \
	  fi; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(1); \
	  rc=$$?; \
	  if [ -n "$$own_policy" ]; then rm -f $$policy; fi; \
	  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet $(2) 2>/dev/null; then \
	    systemctl stop $(2); systemctl disable $(2) 2>/dev/null || true; \
	  fi; \
	  exit $$rc

# MariaDB server binaries for the XA sink's tests (LocalMariaDB runs its own mariadbd in a
# temporary folder).
mariadb:
	@if command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; then \
	  echo "mariadbd: $$(command -v mariadbd || echo /usr/sbin/mariadbd)"; \
	elif [ -n "$$TWOPC_TEST_MARIADB_URL" ]; then \
	  echo "mariadb: tests use TWOPC_TEST_MARIADB_URL"; \
	elif [ "$$(id -u)" = 0 ]; then \
	  $(call apt_install_no_service,mariadb-server,mariadb); \
	else \
	  echo "mariadbd (the MariaDB server) is not installed. Install it with:" >&2; \
	  echo "    sudo apt-get install -y --no-install-recommends mariadb-server" >&2; \
	  echo "or point the tests at a server (InnoDB, XA allowed):" >&2; \
	  echo "    TWOPC_TEST_MARIADB_URL=mysql+pymysql://user:pw@host:port/db" >&2; \
	  exit 1; \
	fi

# Prometheus's promtool, which tests/ops/test_monitoring_rules.py runs on monitoring/ (`promtool
# test rules`); Debian ships it in the prometheus package, whose service is kept from starting.
promtool:
	@if command -v promtool >/dev/null 2>&1; then \
	  echo "promtool: $$(command -v promtool)"; \
	elif [ "$$(id -u)" = 0 ]; then \
	  $(call apt_install_no_service,prometheus,prometheus); \
	else \
	  echo "promtool (Prometheus's rule checker) is not installed. Install it with:" >&2; \
	  echo "    sudo apt-get install -y --no-install-recommends prometheus" >&2; \
	  exit 1; \
	fi

# The PostgreSQL JDBC driver jar, for Spark's own format("jdbc") writer that
# tests/spark/test_type_matrix.py and the benchmarks compare twopc with.
JDBC_JAR := /usr/share/java/postgresql.jar
jdbc-driver:
	@if [ -e $(JDBC_JAR) ]; then \
	  echo "PostgreSQL JDBC driver: $(JDBC_JAR)"; \
	elif [ "$$(id -u)" = 0 ]; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y libpostgresql-jdbc-java || \
	  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y libpostgresql-jdbc-java); \
	else \
	  echo "The PostgreSQL JDBC driver ($(JDBC_JAR)) is not installed. Install it with:" >&2; \
	  echo "    sudo apt-get install -y libpostgresql-jdbc-java" >&2; \
	  exit 1; \
	fi

# The lint and type gate: ruff and mypy (configured in pyproject.toml), the import contracts
# (lint-imports: [tool.importlinter] in pyproject.toml; always on the four packages), and every
# `noqa` or `type: ignore` must say why on its own line.  All four run; any finding fails.
SUPPRESSION_WITHOUT_REASON := \#[[:space:]]*(noqa(:[[:space:]]*[A-Z]+[0-9]+([[:space:]]*,[[:space:]]*[A-Z]+[0-9]+)*)?|type:[[:space:]]*ignore(\[[^]]*\])?)[[:space:]]*$$

lint: venv
	@rc=0; \
	echo "ruff check $(LINT_PATHS)"; $(VPY) -m ruff check $(LINT_PATHS) || rc=1; \
	echo "mypy $(MYPY_PATHS)"; $(VPY) -m mypy $(MYPY_PATHS) || rc=1; \
	echo "lint-imports (import contracts)"; PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(VENV)/bin/lint-imports --no-cache || rc=1; \
	echo "noqa / type: ignore with a reason"; \
	if grep -rnE --include='*.py' '$(SUPPRESSION_WITHOUT_REASON)' $(LINT_PATHS); then \
	  echo "lint: say on the same line why each suppression above is needed" >&2; rc=1; \
	fi; \
	exit $$rc

# The documentation site (Sphinx + MyST, docs/ -> docs/_build/html). Warnings are errors (-W), so
# a broken link, a page missing from the table of contents or an option without documentation
# text (docs/_ext/twopc_options.py) fails it; --keep-going reports them all first. Not nitpicky
# (-n): the docstrings' cross-references to pyspark and to names outside the API pages would
# each be a warning.
docs: venv
	$(VPY) -m sphinx -W --keep-going -q -b html docs docs/_build/html

test: lint docs venv redis mariadb promtool jdbc-driver
	$(VPY) -m pytest -m "$(TEST_MARKERS)" $(PYTEST_ARGS)

test-all:
	$(MAKE) test TEST_MARKERS=

# The inner loop: tests/unit, which needs no server and no Spark (under a minute; no lint gate).
test-fast: venv
	$(VPY) -m pytest tests/unit -m "$(TEST_MARKERS)" $(PYTEST_ARGS)

# Randomized chaos schedules (tests/chaos/test_chaos_schedules.py; `make test` runs 30 of them):
# `make chaos N=500` for a long run, `make chaos SEED=123 N=1` to rerun one schedule;
# SINKS=file,redis limits the sinks, BROKEN=coordinator|sink runs a deliberately broken one,
# REPORT=path names the table's file (default $TMPDIR/twopc-chaos-<seed>.txt), MINUTES=45 stops
# starting schedules after 45 minutes (the table says how many ran), SHRINK=0 skips shrinking.
N ?= 500
chaos: venv redis mariadb
	TWOPC_CHAOS_SEED=$(SEED) TWOPC_CHAOS_N=$(N) TWOPC_CHAOS_SINKS=$(SINKS) TWOPC_CHAOS_BROKEN=$(BROKEN) \
	  TWOPC_CHAOS_REPORT=$(REPORT) TWOPC_CHAOS_MINUTES=$(MINUTES) TWOPC_CHAOS_SHRINK=$(SHRINK) $(VPY) -m pytest tests/chaos/test_chaos_schedules.py -q -o faulthandler_timeout=0 $(PYTEST_ARGS)

demo: venv
	$(VPY) -m twopc.recovery.demos.stream_demo

# Each bench module appends its ratios to $(BENCH_RESULTS); bench_summary prints them last,
# each with its target (recovery/demos/bench_summary.py), the machine and the date.
BENCH_RESULTS := build/bench/results.jsonl
bench: export TWOPC_BENCH_RESULTS = $(BENCH_RESULTS)
bench: venv redis mariadb
	@$(MAKE) --no-print-directory jdbc-driver || echo "bench: the Spark JDBC writers are skipped" >&2
	@rm -f $(BENCH_RESULTS)
	$(VPY) -m twopc.recovery.demos.bench_first_write
	$(VPY) -m twopc.recovery.demos.bench
	$(VPY) -m twopc.recovery.demos.bench_redis
	$(VPY) -m twopc.recovery.demos.bench_stream
	$(VPY) -m twopc.recovery.demos.bench_composite
	$(VPY) -m twopc.recovery.demos.bench_xa
	$(VPY) -m twopc.recovery.demos.bench_http
	$(VPY) -m twopc.recovery.demos.bench_summary

clean:
	rm -rf $(VENV) docs/_build build dist *.egg-info .pytest_cache .hypothesis .mypy_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
