"""Backend drivers are optional pip extras. A sink imports its driver through :func:`require`,
which turns a missing one into a :class:`~twopc.MissingExtraError` naming the extra::

    psycopg = require("psycopg", "postgres", "twopc-postgres")"""

from __future__ import annotations

import importlib
from types import ModuleType

from ._errors import MissingExtraError

__all__ = ["EXTRAS", "require"]

#: each backend extra of pyproject.toml and its top-level modules (``all`` installs every one)
EXTRAS: dict[str, tuple[str, ...]] = {"postgres": ("psycopg",), "mysql": ("pymysql",),
                                      "redis": ("redis", "hiredis", "msgpack"), "s3": ("boto3",),
                                      "http": ("httpx", "sniffio")}


def require(module_name: str, extra: str, what: str) -> ModuleType:
    """Import *module_name*, a driver of twopc's extra *extra*, on behalf of *what*.
    Raises MissingExtraError: it is not installed or fails to import (with why); the fix is
    ``pip install 'pyspark-twopc[<extra>]'``.
    Raises ValueError: *extra* is unknown or does not install *module_name* (a caller's bug)."""
    if (provided := EXTRAS.get(extra)) is None:
        raise ValueError(f"unknown twopc extra {extra!r}: one of {', '.join(sorted(EXTRAS))}")
    if module_name.partition(".")[0] not in provided:
        raise ValueError(f"twopc's extra {extra!r} installs {', '.join(provided)}, not {module_name!r}")
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        missing = exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + "."))
        reason = "which is not installed" if missing else f"which fails to import ({type(exc).__name__}: {exc})"
        raise MissingExtraError(module_name, extra, what, reason) from exc
