"""Package edges: importing the library does not load faultinject's test servers or its
chaos runner (they start processes and are for tests and demos only), and those still load
on first use."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from twopc import faultinject

from tests._paths import REPO_ROOT

REPO = REPO_ROOT

HEAVY = (
    "twopc.faultinject.servers",
    "twopc.faultinject._server",
    "twopc.faultinject._postgres",
    "twopc.faultinject._mariadb",
    "twopc.faultinject._redis",
    "twopc.faultinject._procutil",
    "twopc.faultinject.chaos",
    "twopc.faultinject._proxy",
    "twopc.faultinject._control",
)
LAZY_NAMES = ("ChaosJobFailed", "ChaosReport", "ChaosRun", "ChaosRunner", "FaultControl",
              "FaultProxy", "LocalMariaDB", "LocalPostgres", "LocalRedis", "ProxyConnection")


def _fresh(code: str) -> object:
    """Run *code* in a fresh interpreter (from the repository root) and return the JSON it prints."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("package", ["twopc", "twopc.sinks", "twopc.recovery", "twopc.faultinject"])
def test_import_does_not_load_servers_or_chaos_runner(package: str) -> None:
    loaded = _fresh(f"import json, sys; import {package}; "
                    f"print(json.dumps(sorted(m for m in {list(HEAVY)!r} if m in sys.modules)))")
    assert loaded == []


def test_lazy_names_load_on_first_use() -> None:
    code = (
        "import json, sys\nfrom twopc import faultinject\n"
        "before = 'twopc.faultinject.servers' in sys.modules\n"
        "listed = {'LocalPostgres', 'ChaosRunner'} <= set(dir(faultinject))\n"
        "from twopc.faultinject import LocalPostgres\n"
        "runner = faultinject.ChaosRunner\n"
        "print(json.dumps({'before': before, 'listed': listed,\n"
        "                  'servers': 'twopc.faultinject.servers' in sys.modules,\n"
        "                  'chaos': 'twopc.faultinject.chaos' in sys.modules,\n"
        "                  'names': [LocalPostgres.__module__, runner.__module__]}))\n"
    )
    assert _fresh(code) == {"before": False, "listed": True, "servers": True, "chaos": True,
                            "names": ["twopc.faultinject._postgres", "twopc.faultinject.chaos"]}


def test_lazy_names_are_public() -> None:
    for name in LAZY_NAMES:
        assert name in faultinject.__all__
        assert name in dir(faultinject)
        assert getattr(faultinject, name).__name__ == name
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchThing'"):
        _ = faultinject.NoSuchThing


#: modules a write never needs, which every Spark Python worker of a write would otherwise
#: import again (the planner, each task, the commit): the Prometheus client (serving metrics),
#: Parquet (the file sink's writer) and pandas (which pyarrow imports on the first scalar made
#: from a Python value: see twopc.sinks.postgres._binary.const)
NOT_ON_THE_WRITE_PATH = ("prometheus_client", "pyarrow.parquet", "pandas")


@pytest.mark.parametrize("module", ["twopc", "twopc.sinks", "twopc.sinks.sql._jdbc", "twopc.sinks.postgres",
                                    "twopc.sinks._sources", "twopc.spi"])
def test_the_write_path_does_not_import_what_only_other_uses_need(module: str) -> None:
    loaded = _fresh(f"import json, sys; import {module}; "
                    f"print(json.dumps(sorted(m for m in {list(NOT_ON_THE_WRITE_PATH)!r} if m in sys.modules)))")
    assert loaded == []


#: what registering the data sources (a job's driver, Spark's worker that looks data sources up)
#: never needs: the sinks' database drivers and SQLAlchemy load in the workers of a write
NOT_IN_THE_DRIVER = ("sqlalchemy", "psycopg", "pymysql", "redis", "httpx", "twopc.sinks.sql", "twopc.sinks.postgres",
                     "twopc.sinks.http")


def test_registering_the_data_sources_loads_no_sink() -> None:
    code = ("import json, sys\nfrom twopc import sinks\n"
            "names = {ds.name(): list(ds.session_option_names()) for ds in sinks.DATA_SOURCES}\n"
            f"print(json.dumps({{'names': names, 'loaded': sorted(m for m in {list(NOT_IN_THE_DRIVER)!r} "
            "if m in sys.modules)}))")
    assert _fresh(code) == {"loaded": [], "names": {
        "twopc-jdbc": ["twopcSchema"], "twopc-postgres": ["twopcSchema"], "twopc-redis": [], "twopc-file": [],
        "twopc-http": [], "twopc-composite": []}}


def test_a_data_source_states_the_session_options_of_its_sink() -> None:
    from twopc import sinks

    for ds in sinks.DATA_SOURCES:
        assert ds.session_option_names() == tuple(ds.sink_class.__session_options__), ds.name()


def test_metrics_and_parquet_still_load_on_first_use() -> None:
    code = ("import json, sys, twopc, twopc.spi.operations, twopc.sinks\n"
            "names = [twopc.serve_metrics.__name__, twopc.register_metrics.__name__,\n"
            "         twopc.spi.operations.MetricsCollector.__name__]\n"
            "print(json.dumps({'names': names, 'prometheus': 'prometheus_client' in sys.modules,\n"
            "                  'in_all': {'serve_metrics', 'register_metrics'} <= set(twopc.__all__)}))\n")
    assert _fresh(code) == {"names": ["serve_metrics", "register_metrics", "MetricsCollector"],
                            "prometheus": True, "in_all": True}


#: what importing each package loads of twopc besides itself: the packages serve their names
#: on first use (twopc._lazy), so a Spark Python worker loads the modules of what it runs only
#: (twopc.sinks registers the built-in handle kinds: twopc.sinks._handles and what it needs)
_HANDLES = ["twopc._errors", "twopc._handle", "twopc.sinks._handles", "twopc.spi.runtime"]
LOADED_BY_IMPORT = {
    "twopc": ["twopc._lazy"],
    "twopc.spi": ["twopc", "twopc._lazy"],
    "twopc.spi.lease": ["twopc", "twopc._lazy", "twopc.spi"],
    "twopc.spi.runtime": ["twopc", "twopc._lazy", "twopc.spi"],
    "twopc.spi.operations": ["twopc", "twopc._lazy", "twopc.spi"],
    "twopc.sinks": ["twopc", "twopc._lazy", "twopc.spi", *_HANDLES],
    "twopc.sinks.sql": ["twopc", "twopc._lazy", "twopc.sinks", "twopc.spi", *_HANDLES],
    "twopc.faultinject": ["twopc", "twopc._lazy", "twopc.faultinject._env", "twopc.faultinject._point"],
}


@pytest.mark.parametrize("package", sorted(LOADED_BY_IMPORT))
def test_a_package_loads_the_modules_of_its_names_on_first_use(package: str) -> None:
    code = ("import importlib, json, sys\n"
            f"package = importlib.import_module({package!r})\n"
            f"loaded = sorted(m for m in sys.modules if m.startswith('twopc') and m != {package!r})\n"
            "names = {n: getattr(package, n) is not None for n in package.__all__}\n"
            "print(json.dumps({'loaded': loaded, 'every name': all(names.values()) and len(names) > 0,\n"
            "                  'listed': set(package.__all__) <= set(dir(package)),\n"
            "                  'kept': all(n in vars(package) for n in package.__all__)}))\n")
    assert _fresh(code) == {"loaded": sorted(LOADED_BY_IMPORT[package]), "every name": True, "listed": True,
                            "kept": True}
