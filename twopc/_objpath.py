"""Load an object named ``package.module:qualname`` (the one rule for such paths)."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["class_path", "load_object"]


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


def class_path(cls: type) -> str:
    """``module:qualname`` of *cls*: the path :func:`load_object` loads it back from."""
    return f"{cls.__module__}:{cls.__qualname__}"
