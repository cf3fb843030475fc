"""Spark Connect: the data sources run on the server, whose Python must import twopc (and each
registered format's package) with the client's minor version. Registration is by reference, so
without :func:`check_server` (one small task importing them) a client-only install fails only at
the first write (``PYTHON_DATA_SOURCE_ERROR … ModuleNotFoundError``)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .._errors import ConfigurationError

__all__ = ["check_server", "is_connect"]

log = logging.getLogger("twopc.spark")


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect session (no JVM in this process)."""
    return getattr(spark, "_jsparkSession", None) is None and hasattr(spark, "client")


def _probe(packages: list[str]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """A ``mapInArrow`` function pickled by value: the server needs nothing of twopc to run it."""
    def probe(batches: Iterator[Any]) -> Iterator[Any]:
        import importlib
        import json as server_json
        import sys as server_sys

        import pyarrow as server_pa
        for _ in batches:
            pass
        missing = []
        for name in packages:
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - any failure to import is what the check reports
                missing.append(f"{name} ({type(exc).__name__}: {exc})")
        version = "{}.{}".format(*server_sys.version_info[:2])
        found = server_json.dumps({"python": version, "executable": server_sys.executable, "missing": missing})
        yield server_pa.RecordBatch.from_pydict({"probe": [found]})
    return probe


def check_server(spark: Any, packages: Iterable[str]) -> None:
    """Check that *spark*'s Connect server imports *packages* with this Python's minor version.
    Raises ConfigurationError: it cannot import one, or runs another minor version; the message
    names what to install where."""
    wanted = sorted(set(packages))
    here = "{}.{}".format(*sys.version_info[:2])
    install = (f"install pyspark-twopc with the extras of the formats you use "
               f"(pip install 'pyspark-twopc[all]') in the Python "
               f"environment the Spark Connect server runs its Python workers with (its PYSPARK_PYTHON), "
               f"Python {here} like this client, then restart the server")
    try:
        row = spark.range(1, numPartitions=1).mapInArrow(_probe(wanted), "probe STRING").collect()[0]
    except Exception as exc:  # noqa: BLE001 - whatever the server answers, the error below says what to do
        text = str(exc)
        if "PYTHON_VERSION_MISMATCH" in text or "different minor versions" in text:
            raise ConfigurationError(
                f"the Spark Connect server runs its Python workers with another Python minor version than this "
                f"client (Python {here}), so no Python data source can run there: {install}") from None
        raise ConfigurationError(f"could not check that the Spark Connect server can import twopc ({text[:500]}): "
                                 f"{install}") from None
    found = json.loads(row["probe"])
    if found["missing"]:
        raise ConfigurationError(
            f"the Spark Connect server cannot import {', '.join(found['missing'])} with its Python "
            f"{found['python']} ({found['executable']}): twopc's formats run on the server, not in this client, "
            f"so every write would fail there. {install}")
    log.info("twopc: the Spark Connect server imports %s (Python %s, %s)", ", ".join(wanted), found["python"],
             found["executable"])
