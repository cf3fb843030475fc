"""Process-wide registry of fault-point names: declared with :func:`declare` when a module loads,
or as data named by an entry point of group ``twopc.fault_points``, read on first listing."""

from __future__ import annotations

import threading
from importlib.metadata import entry_points

from ._names import check_point_name

ENTRY_POINT_GROUP = "twopc.fault_points"

_lock = threading.Lock()
_points: dict[str, str] = {}
_packages_read = False


def declare(name: str, description: str) -> str:
    """Declare fault point *name* and return it; the same description again is a no-op.
    FaultSpecError for an invalid name, ValueError when declared with another description."""
    check_point_name(name)
    with _lock:
        old = _points.get(name)
        if old is not None and old != description:
            raise ValueError(f"fault point {name!r} already declared as {old!r}, not {description!r}")
        _points[name] = description
    return name


def declared_points() -> dict[str, str]:
    """A copy of the registry (name → description, in order), with every installed entry point's points."""
    global _packages_read
    if not _packages_read:
        for entry in entry_points(group=ENTRY_POINT_GROUP):
            for name, description in entry.load().items():
                declare(name, description)
        _packages_read = True
    with _lock:
        return dict(_points)
