"""Load an object named ``package.module:qualname`` (the one rule for such paths)."""

from __future__ import annotations

import importlib
import importlib.util
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
    obj: Any = importlib.import_module(_current_module(module))
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


#: twopc's packages that were top-level ``twopc.sinks``, ``twopc.recovery`` and ``twopc.faultinject`` before 0.2: a
#: checkpoint written by an older twopc records its sink class as ``twopc.sinks.postgres._sink:...``.
_MOVED_UNDER_TWOPC = ("twopc.sinks", "twopc.recovery", "twopc.faultinject")


def _current_module(module: str) -> str:
    """*module*, or ``twopc.<module>`` when it names a module of a package that moved under
    ``twopc`` (and that module exists there): never a job's own ``twopc.sinks`` in its place."""
    if module.partition(".")[0] in _MOVED_UNDER_TWOPC:
        moved = f"twopc.{module}"
        try:
            if importlib.util.find_spec(moved) is not None:
                return moved
        except ModuleNotFoundError:
            pass
    return module


def class_path(cls: type) -> str:
    """``module:qualname`` of *cls*: the path :func:`load_object` loads it back from."""
    return f"{cls.__module__}:{cls.__qualname__}"
