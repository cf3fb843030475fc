"""The test suite's plug-ins and its folder markers (tests/README.md says where a test goes).

Fixtures live in the ``fix_*.py`` plug-ins below, one concern each; servers and the
SparkSession start on first use only, so collecting (and ``make test-fast``) starts none.
Every test gets the markers of the folders it sits in (``tests/sinks/postgres/x.py`` →
``sinks``, ``postgres``), and ``spark`` too when it uses the ``spark`` fixture.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis judges durations by default: an example slower than 200 ms fails the test (as
# "unreliable timings" when its rerun is fast), and so does a slow data generation. On a shared
# 2-core machine both fail correct tests; the suite asserts no duration, so neither applies.
settings.register_profile("twopc", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("twopc")

pytest_plugins = [
    "tests.fix_common",
    "tests.fix_postgres",
    "tests.fix_redis",
    "tests.fix_mariadb",
    "tests.fix_sql",
    "tests.fix_s3",
    "tests.fix_spark",
]

_TESTS = Path(__file__).resolve().parent
#: the folders under tests/, each the name of the marker its tests get (registered in pyproject.toml)
FOLDER_MARKERS = frozenset(
    {"unit", "protocol", "sinks", "postgres", "mysql", "sql", "redis", "composite", "http", "spark", "ops", "kit",
     "chaos"})
#: the fixtures that start a server or the JVM, which no test in tests/unit may use
SERVER_FIXTURES = frozenset(
    {"postgres_url", "redis_url", "mariadb_url", "s3_server", "spark", "_postgres", "_redis", "_mariadb"})
#: The test files that cost most (tests/README.md, "What the suite costs"), costliest first.
#: They run first: `make test` hands whole files to two processes (pytest-xdist, --dist loadfile
#: in collection order), and a long file handed out last would keep one process busy alone.
SLOWEST_FIRST = (
    "protocol/test_fence_interleavings.py", "chaos/test_kit_chaos.py", "chaos/test_chaos_schedules.py",
    "spark/test_spark_connect.py", "chaos/test_redis_stream_chaos.py", "chaos/test_recover_beside_a_query.py",
    "chaos/test_keyed_replay.py", "ops/test_verify.py", "chaos/test_composite_chaos.py",
    "spark/test_installed_package.py", "spark/test_docs_examples.py", "chaos/test_http_chaos.py",
    "spark/test_spark_http.py", "spark/test_spark_composite.py", "spark/test_stop_leftovers.py",
    "spark/test_dropin_prepared.py", "chaos/test_crash_drills.py", "spark/test_txn_version.py",
)


def _cost_rank(item: pytest.Item) -> int:
    try:
        name = Path(item.path).resolve().relative_to(_TESTS).as_posix()
    except ValueError:
        return len(SLOWEST_FIRST)
    return SLOWEST_FIRST.index(name) if name in SLOWEST_FIRST else len(SLOWEST_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_cost_rank)  # stable: the other files, and each file's tests, keep their order
    for item in items:
        try:
            folders = Path(item.path).resolve().relative_to(_TESTS).parts[:-1]
        except ValueError:  # a test outside tests/ (pytest given another path) gets no folder marker
            continue
        unknown = [f for f in folders if f not in FOLDER_MARKERS]
        if unknown:
            raise pytest.UsageError(f"{item.nodeid}: tests/ has no folder marker for {'/'.join(folders)}; "
                                    f"add {unknown[0]!r} to FOLDER_MARKERS in tests/conftest.py and to the "
                                    f"markers in pyproject.toml")
        servers = SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if {"unit", "protocol"} & set(folders) and servers:
            raise pytest.UsageError(f"{item.nodeid} uses {', '.join(sorted(servers))}: tests/unit runs without "
                                    f"servers and Spark; move it to the folder of what it exercises")
        for folder in folders:
            item.add_marker(folder)
        if "spark" in getattr(item, "fixturenames", ()) and "spark" not in folders:
            item.add_marker("spark")
