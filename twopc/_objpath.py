"""Load an object named ``package.module:qualname`` (the one rule for such paths)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from typing import Any

__all__ = ["class_path", "load_object"]


def load_object(path: str) -> Any:
    """Import ``module`` and follow ``qualname``'s dotted attributes.
    Raises ValueError: *path* is not ``module:qualname``.
    Raises ImportError / AttributeError: the module or the name does not exist."""
    module, sep, qualname = path.partition(":")
    if not sep or not module or not qualname:
        raise ValueError(path)
    obj: Any = importlib.import_module(_current_module(module))
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


#: twopc's packages, top-level before 0.2: an old checkpoint records ``sinks.postgres._sink:...``
_MOVED_UNDER_TWOPC = ("sinks", "recovery", "faultinject")


def _current_module(module: str) -> str:
    """*module*, or ``twopc.<module>`` when that moved submodule exists (a job's own ``sinks`` never
    stands in for it)."""
    top, dot, _ = module.partition(".")
    if dot and top in _MOVED_UNDER_TWOPC:  # twopc's classes were defined in submodules, never in the three packages
        moved = f"twopc.{module}"
        with contextlib.suppress(ModuleNotFoundError):
            if importlib.util.find_spec(moved) is not None:
                return moved
    return module


def class_path(cls: type) -> str:
    """``module:qualname`` of *cls*, as :func:`load_object` loads it."""
    return f"{cls.__module__}:{cls.__qualname__}"
