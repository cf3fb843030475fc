"""Backend drivers are extras: a clear error naming the extra when one is missing."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import driver *module*, or raise an :class:`ImportError` that says which extra of
    twopc installs it.

    Raises:
        ImportError: *module* is not installed; the message names ``twopc[<extra>]``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{what} needs the Python package {module!r}, which is not installed: "
                          f"pip install 'twopc[{extra}]'") from exc
