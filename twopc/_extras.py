"""Backend drivers are optional: each comes with a pip extra of twopc.

twopc's core (the protocol, the ledger, the Spark integration) needs pyspark, pyarrow and
SQLAlchemy. A sink imports its driver through :func:`require`, which turns a missing driver
into a :class:`~twopc.MissingExtraError` whose message names the extra to install::

    psycopg = require("psycopg", "postgres", "twopc-postgres")

The ledger's S3 store (``s3://`` checkpoint locations) needs boto3: the ``s3`` extra.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ._errors import MissingExtraError

__all__ = ["EXTRAS", "require"]

EXTRAS: dict[str, tuple[str, ...]] = {
    "postgres": ("psycopg",),
    "mysql": ("pymysql",),
    "redis": ("redis", "hiredis"),
    "s3": ("boto3",),
    "http": ("httpx", "sniffio"),
}
"""Each backend extra of ``pyproject.toml`` and the top-level modules it installs (the extra
``all`` installs every one of them)."""


def require(module_name: str, extra: str, what: str) -> ModuleType:
    """Import and return *module_name* (e.g. ``"psycopg"`` or ``"redis.exceptions"``), a driver
    installed by twopc's extra *extra*, on behalf of *what* (e.g. ``"twopc-postgres"``).

    Raises:
        MissingExtraError: the module is not installed, or fails to import (then the message
            includes why); ``pip install 'pyspark-twopc[<extra>]'`` is the fix it names.
        ValueError: *extra* is not a backend extra of twopc, or does not install *module_name*
            (a bug in the caller: the message would name the wrong fix).
    """
    provided = EXTRAS.get(extra)
    if provided is None:
        raise ValueError(f"unknown twopc extra {extra!r}: one of {', '.join(sorted(EXTRAS))}")
    if module_name.partition(".")[0] not in provided:
        raise ValueError(f"twopc's extra {extra!r} installs {', '.join(provided)}, not {module_name!r}")
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        missing = exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + "."))
        reason = "which is not installed" if missing else f"which fails to import ({type(exc).__name__}: {exc})"
        raise MissingExtraError(module_name, extra, what, reason) from exc
