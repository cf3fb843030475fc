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
# How many processes `make test` runs its tests in (pytest-xdist; 1: one process, no xdist).
# A test file runs whole in one process, which starts its own servers and Spark application
# on first use: the suite's servers and JVMs count twice, and both cores stay busy.
TEST_WORKERS ?= 2
XDIST = $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder,-p no:xdist)
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

.PHONY: venv python-venv postgres redis mariadb java promtool jdbc-driver gdb lint docs test test-fast test-all \
        chaos demo bench soak bare-check clean

venv: $(STAMP)

# A venv without pip is what `python3 -m venv` leaves behind on Debian/Ubuntu without the
# python3.X-venv package (no ensurepip): it is removed and made again once python-venv passed.
$(STAMP): pyproject.toml $(PKG_INITS)
	@if ! $(VPY) -m pip --version >/dev/null 2>&1; then \
	  rm -rf $(VENV); \
	  $(MAKE) --no-print-directory python-venv && $(PYTHON) -m venv $(VENV); \
	fi
	$(VPY) -m pip install -e '.[all,test,docs]'
	@touch $@

# The system packages the demo and the tests need. Each target looks where the code looks
# (faultinject's find_* functions, PySpark's JAVA_HOME or PATH) and prints what it found. When
# it finds nothing, it installs the Debian package as root, with no system service started, and
# otherwise prints the one `apt-get install` line to run, and fails.

# apt-get install $(1) without letting the package start its service: a policy-rc.d that answers
# 101 ("action forbidden") is put in place for the install when none exists, and the service $(2)
# is stopped and disabled should it run anyway. Ends the shell it runs in with apt-get's status.
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

# $(call apt_install_or_say,PACKAGES,SERVICE,WHAT[,HINT]): as root, apt_install_no_service
# PACKAGES (SERVICE: the service they would start, else -) and go on; otherwise say that WHAT
# is not installed, the line that installs it and HINT, and fail.
apt_install_or_say = if [ "$$(id -u)" = 0 ]; then \
	  ( $(call apt_install_no_service,$(1),$(2)) ) || exit $$?; \
	else \
	  echo "$(3) is not installed. Install it with:" >&2; \
	  echo "    sudo apt-get install -y --no-install-recommends $(1)" >&2; \
	  $(if $(4),echo "$(4)" >&2;) \
	  exit 1; \
	fi

# Python 3.11+ whose venv module makes a venv with pip: Debian and Ubuntu ship ensurepip apart,
# in python3.X-venv (installed here as root when $(PYTHON) is the distribution's own).
python-venv:
	@py=$$(command -v $(PYTHON)) || { \
	  echo "$(PYTHON) not found: install Python 3.11+ (sudo apt-get install -y python3 python3-venv)" \
	       "or name one with make PYTHON=/path/to/python3" >&2; exit 1; }; \
	$$py -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "twopc needs Python 3.11+; $$py is $$($$py -V 2>&1): name another with make PYTHON=..." >&2; exit 1; }; \
	venv_ok() { tmp=$$(mktemp -d) && $$py -m venv "$$tmp/v" >/dev/null 2>&1 \
	  && "$$tmp/v/bin/python" -m pip --version >/dev/null 2>&1; rc=$$?; rm -rf "$$tmp"; return $$rc; }; \
	if venv_ok; then exit 0; fi; \
	pkg=$$($$py -c 'import sys; print("python%d.%d-venv" % sys.version_info[:2])'); \
	if [ "$$(id -u)" = 0 ] && dpkg -S "$$(readlink -f "$$py")" >/dev/null 2>&1; then \
	  ( $(call apt_install_no_service,$$pkg,-) ) && venv_ok && exit 0; \
	  echo "$$py -m venv makes no venv with pip, even after installing $$pkg" >&2; exit 1; \
	fi; \
	echo "$$py -m venv cannot make a virtual environment with pip (its ensurepip is missing)." >&2; \
	echo "On Debian/Ubuntu, install it with:" >&2; \
	echo "    sudo apt-get install -y $$pkg" >&2; \
	echo "or name a Python 3.11+ that has it: make PYTHON=/path/to/python3" >&2; \
	exit 1

# The PostgreSQL server binaries, found where LocalPostgres finds them (find_pg_bindir in
# faultinject/_postgres.py): $$TWOPC_PG_BINDIR, pg_config --bindir, the newest
# /usr/lib/postgresql/<version>/bin (Debian's, not on PATH), initdb's folder on PATH. Debian's
# postgresql package creates a cluster of its own (main, port 5432), which is not started.
find_pg_bindir = for d in "$$TWOPC_PG_BINDIR" "$$(pg_config --bindir 2>/dev/null)" \
	    $$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV) \
	    "$$(dirname "$$(command -v initdb 2>/dev/null || echo .)")"; do \
	  if [ -n "$$d" ] && [ -x "$$d/initdb" ] && [ -x "$$d/postgres" ]; then echo "$$d"; break; fi; \
	done
postgres:
	@bindir=$$($(find_pg_bindir)); \
	if [ -z "$$bindir" ]; then \
	  $(call apt_install_or_say,postgresql,postgresql,The PostgreSQL server (initdb and postgres),or set TWOPC_PG_BINDIR to the folder that holds them); \
	  bindir=$$($(find_pg_bindir)); \
	  [ -n "$$bindir" ] || { echo "postgresql is installed, yet no initdb and postgres were found" >&2; exit 1; }; \
	fi; \
	echo "PostgreSQL server binaries: $$bindir"

redis:
	@if command -v redis-server >/dev/null 2>&1; then \
	  echo "redis-server: $$(command -v redis-server)"; \
	else \
	  $(call apt_install_or_say,redis-server,redis-server,redis-server,or point the tests at a server: TWOPC_TEST_REDIS_URL=redis://host:port/0); \
	  echo "redis-server: $$(command -v redis-server)"; \
	fi

# MariaDB server binaries for the XA sink's tests (LocalMariaDB runs its own mariadbd in a
# temporary folder).
mariadb:
	@if command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; then \
	  echo "mariadbd: $$(command -v mariadbd || echo /usr/sbin/mariadbd)"; \
	elif [ -n "$$TWOPC_TEST_MARIADB_URL" ]; then \
	  echo "mariadb: tests use TWOPC_TEST_MARIADB_URL"; \
	else \
	  $(call apt_install_or_say,mariadb-server,mariadb,mariadbd (the MariaDB server),or point the tests at a server (InnoDB with XA): TWOPC_TEST_MARIADB_URL=mysql+pymysql://user:pw@host:port/db); \
	  echo "mariadbd: $$(command -v mariadbd || echo /usr/sbin/mariadbd)"; \
	fi

# A Java runtime 17 or newer for PySpark: $$JAVA_HOME/bin/java when JAVA_HOME is set, else java
# on PATH (what pyspark's bin/spark-class runs). Installs the first of openjdk-17, -21 and
# -25-jdk-headless that apt knows.
java_version = j="$${JAVA_HOME:+$$JAVA_HOME/bin/}java"; \
	  v=$$("$$j" -version 2>&1 | sed -n 's/.* version "\([^"]*\)".*/\1/p' | head -n 1); \
	  case "$$v" in 1.*) v=$${v\#1.};; esac; v=$${v%%[!0-9]*}; echo "$${v:-0}"
jdk_package = for v in 17 21 25; do \
	  if apt-cache show openjdk-$$v-jdk-headless 2>/dev/null | grep -q '^Package:'; then \
	    echo openjdk-$$v-jdk-headless; exit 0; \
	  fi; \
	done; echo openjdk-17-jdk-headless
java:
	@v=$$($(java_version)); \
	if [ "$$v" -ge 17 ]; then echo "java $$v: $$(command -v "$${JAVA_HOME:+$$JAVA_HOME/bin/}java")"; exit 0; fi; \
	if [ -n "$$JAVA_HOME" ]; then \
	  echo "JAVA_HOME=$$JAVA_HOME has no java 17 or newer, and PySpark runs $$JAVA_HOME/bin/java:" \
	       "point JAVA_HOME at a JDK 17+, or unset it" >&2; exit 1; \
	fi; \
	if [ "$$(id -u)" = 0 ]; then apt-get update >/dev/null; fi; \
	pkg=$$($(jdk_package)); \
	$(call apt_install_or_say,$$pkg,-,A Java runtime 17 or newer (for PySpark; java on PATH: $$([ "$$v" = 0 ] && echo none || echo $$v))); \
	v=$$($(java_version)); \
	if [ "$$v" -lt 17 ]; then \
	  echo "java on PATH is still $$v after installing $$pkg: choose the new one with" \
	       "update-alternatives --config java, or set JAVA_HOME=/usr/lib/jvm/<its folder>" >&2; exit 1; \
	fi; \
	echo "java $$v: $$(command -v java)"

# Prometheus's promtool, which tests/ops/test_monitoring_rules.py runs on monitoring/ (`promtool
# test rules`); Debian ships it in the prometheus package, whose service is kept from starting.
promtool:
	@if command -v promtool >/dev/null 2>&1; then \
	  echo "promtool: $$(command -v promtool)"; \
	else \
	  $(call apt_install_or_say,prometheus,prometheus,promtool (Prometheus's rule checker)); \
	  echo "promtool: $$(command -v promtool)"; \
	fi

# The PostgreSQL JDBC driver jar, for Spark's own format("jdbc") writer that
# tests/spark/test_type_matrix.py and the benchmarks compare twopc with.
JDBC_JAR := /usr/share/java/postgresql.jar
jdbc-driver:
	@if [ -e $(JDBC_JAR) ]; then \
	  echo "PostgreSQL JDBC driver: $(JDBC_JAR)"; \
	else \
	  $(call apt_install_or_say,libpostgresql-jdbc-java,-,The PostgreSQL JDBC driver ($(JDBC_JAR))); \
	  echo "PostgreSQL JDBC driver: $(JDBC_JAR)"; \
	fi

# gdb, with which two tests hold a server's thread inside a window of a few instructions
# (tests/_gdb.py).
gdb:
	@if command -v gdb >/dev/null 2>&1; then \
	  echo "gdb: $$(command -v gdb)"; \
	else \
	  $(call apt_install_or_say,gdb,-,gdb (the debugger)); \
	  echo "gdb: $$(command -v gdb)"; \
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
	echo "structure: no reach into a part's privates, no new forwarding method"; \
	$(VPY) -m tests._structure_lint twopc sinks || rc=1; \
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

test: lint docs venv postgres redis mariadb java promtool jdbc-driver gdb
	$(VPY) -m pytest -m "$(TEST_MARKERS)" $(XDIST) --durations=20 $(PYTEST_ARGS)

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
chaos: venv postgres redis mariadb
	TWOPC_CHAOS_SEED=$(SEED) TWOPC_CHAOS_N=$(N) TWOPC_CHAOS_SINKS=$(SINKS) TWOPC_CHAOS_BROKEN=$(BROKEN) \
	  TWOPC_CHAOS_REPORT=$(REPORT) TWOPC_CHAOS_MINUTES=$(MINUTES) TWOPC_CHAOS_SHRINK=$(SHRINK) $(VPY) -m pytest tests/chaos/test_chaos_schedules.py -q -o faulthandler_timeout=0 $(PYTEST_ARGS)

demo: venv postgres redis java
	$(VPY) -m twopc.recovery.demos.stream_demo

# Each bench module appends its ratios to $(BENCH_RESULTS); bench_summary prints them last,
# each with its target (recovery/demos/bench_summary.py), the machine and the date.
BENCH_RESULTS := build/bench/results.jsonl
bench: export TWOPC_BENCH_RESULTS = $(BENCH_RESULTS)
bench: venv postgres redis mariadb java
	@$(MAKE) --no-print-directory jdbc-driver || echo "bench: the Spark JDBC writers are skipped" >&2
	@rm -f $(BENCH_RESULTS)
	$(VPY) -m twopc.recovery.demos.bench_first_write
	$(VPY) -m twopc.recovery.demos.bench
	$(VPY) -m twopc.recovery.demos.bench_redis
	$(VPY) -m twopc.recovery.demos.bench_stream
	$(VPY) -m twopc.recovery.demos.bench_composite
	$(VPY) -m twopc.recovery.demos.bench_xa
	$(VPY) -m twopc.recovery.demos.bench_http
	$(VPY) -m twopc.recovery.demos.bench_memory
	$(VPY) -m twopc.recovery.demos.bench_summary

# The soak (not a test): micro-batches of 10 rows into twopc-postgres, twopc-redis and twopc-jdbc,
# and as many batch writes of twopc-jdbc without a checkpoint, all at once; a record every SOAK_EVERY of the
# cost per batch, the ledger's files, bytes and rows, and the RSS of the driver and its agent,
# judged at the end (recovery/demos/bench_soak.py). `make soak SOAK_BATCHES=1000 SOAK_EVERY=100`
# for a shorter run.
SOAK_BATCHES ?= 5000
SOAK_EVERY ?= 500
soak: venv postgres redis java
	$(VPY) -m twopc.recovery.demos.bench_soak --batches $(SOAK_BATCHES) --every $(SOAK_EVERY)

# `make demo` and `make test` on a bare Debian: a debootstrapped root with only python3,
# python3-venv, make, git and ca-certificates, a clone of HEAD, both targets run in a chroot
# (root; `.ci/bare-root-check --help`; BARE_ARGS="--full" runs the whole suite there).
BARE_ARGS ?=
bare-check:
	.ci/bare-root-check $(BARE_ARGS)

clean:
	rm -rf $(VENV) docs/_build build dist *.egg-info .pytest_cache .hypothesis .mypy_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
