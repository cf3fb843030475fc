"""Load an object named ``package.module:qualname`` (the one rule for such paths)."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["load_object"]


def load_object(path: str) -> Any:
    """Import ``module`` and follow ``qualname``'s dotted attributes.

    Raises:
        ValueError: *path* is not ``module:qualname``.
        ImportError / AttributeError: the module or the name does not exist.
    """
    module, sep, qualname = path.partition(":")
    if not sep or not module or not qualname:
        raise ValueError(path)
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj
