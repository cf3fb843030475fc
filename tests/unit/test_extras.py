"""Backend drivers are extras: twopc's core imports without them, and a missing driver is a
``MissingExtraError`` naming the extra to install. Missing drivers are real: a fresh
interpreter blocks the import (``sys.modules[name] = None``)."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
import tomllib

import psycopg
import pytest

from twopc import ConfigurationError, MissingExtraError, TwoPCError
from twopc._extras import EXTRAS, require

from tests._paths import REPO_ROOT

REPO = REPO_ROOT
DRIVERS = ("psycopg", "pymysql", "redis")


def _fresh(code: str) -> object:
    """Run *code* in a fresh interpreter (from the repository root) and return the JSON it prints."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


_BLOCKED = """
import json, sys
sys.modules[{block!r}] = None   # as if it were not installed
from twopc import ConfigurationError, MissingExtraError, TwoPCError
from twopc._extras import require
try:
    require({module!r}, {extra!r}, {what!r})
except MissingExtraError as exc:
    print(json.dumps({{
        "message": str(exc), "name": exc.name, "extra": exc.extra,
        "bases": [isinstance(exc, c) for c in (ImportError, ConfigurationError, TwoPCError)],
        "cause": type(exc.__cause__).__name__,
    }}))
else:
    print(json.dumps("imported"))
"""


@pytest.mark.parametrize(("module", "extra", "what"), [
    ("psycopg", "postgres", "twopc-postgres"),
    ("pymysql", "mysql", "twopc-jdbc (MySQL/MariaDB)"),
    ("redis", "redis", "twopc-redis"),
    ("redis.exceptions", "redis", "twopc-redis"),
])
def test_missing_driver_names_the_extra(module: str, extra: str, what: str) -> None:
    found = _fresh(_BLOCKED.format(block=module.partition(".")[0], module=module, extra=extra, what=what))
    assert found == {
        "message": f"{what} needs the Python module {module!r}, which is not installed. "
                   f"Install it with: pip install 'pyspark-twopc[{extra}]'",
        "name": module, "extra": extra, "bases": [True, True, True], "cause": "ModuleNotFoundError",
    }


def test_driver_that_fails_to_import_says_why() -> None:
    # psycopg is there, but a module it imports is not: the fix is still the extra, and the
    # message keeps the real reason.
    found = _fresh(_BLOCKED.format(block="psycopg.pq", module="psycopg", extra="postgres", what="twopc-postgres"))
    assert isinstance(found, dict)
    assert found["message"].startswith("twopc-postgres needs the Python module 'psycopg', which fails to "
                                       "import (")
    assert found["message"].endswith("Install it with: pip install 'pyspark-twopc[postgres]'")
    assert "psycopg.pq" in found["message"]


def test_installed_driver_is_returned() -> None:
    assert require("psycopg", "postgres", "twopc-postgres") is psycopg


def test_wrong_extra_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match=re.escape("unknown twopc extra 'postgresql'")):
        require("psycopg", "postgresql", "twopc-postgres")
    wrong = "twopc's extra 'redis' installs redis, hiredis, msgpack, not 'psycopg'"
    with pytest.raises(ValueError, match=re.escape(wrong)):
        require("psycopg", "redis", "twopc-postgres")


def test_error_survives_pickling() -> None:
    err = MissingExtraError("redis", "redis", "twopc-redis")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is MissingExtraError
    assert (str(back), back.name, back.extra, back.what) == (str(err), "redis", "redis", "twopc-redis")
    assert isinstance(back, ImportError)
    assert isinstance(back, ConfigurationError)
    assert isinstance(back, TwoPCError)


def test_extras_match_pyproject() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    backends = {name: reqs for name, reqs in declared.items() if name not in ("test", "docs")}
    assert set(backends) == {*EXTRAS, "all"}
    for extra, modules in EXTRAS.items():
        assert [re.split(r"[\[<>=]", r)[0].lower() for r in backends[extra]] == list(modules)
    assert sorted(backends["all"]) == sorted(r for extra in EXTRAS for r in backends[extra])
    core = [re.split(r"[\[<>=]", r)[0].lower() for r in tomllib.loads(
        (REPO / "pyproject.toml").read_text())["project"]["dependencies"]]
    assert core == ["pyspark", "pyarrow", "sqlalchemy", "prometheus-client"]


@pytest.mark.parametrize("package", ["twopc", "twopc.recovery", "twopc.faultinject"])
def test_core_packages_import_without_any_driver(package: str) -> None:
    blocked = "; ".join(f"sys.modules[{d!r}] = None" for d in DRIVERS)
    assert _fresh(f"import json, sys; {blocked}; import {package}; print(json.dumps('ok'))") == "ok"
