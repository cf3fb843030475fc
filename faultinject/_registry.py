"""Process-wide registry of declared fault-point names.

A package declares its points with :func:`declare` when its module loads, or as data: a
mapping of point name to description named by an entry point of the group
``twopc.fault_points`` (twopc's protocol declares its own so), read by :func:`declared_points`
the first time it is called. A process that never lists or validates points loads none of it.
"""

from __future__ import annotations

import threading
from importlib.metadata import entry_points

from ._names import check_point_name

ENTRY_POINT_GROUP = "twopc.fault_points"

_lock = threading.Lock()
_points: dict[str, str] = {}
_packages_read = False


def declare(name: str, description: str) -> str:
    """Declare fault point ``name`` and return the name (handy for module constants).

    Re-declaring with the same description is a no-op.

    Raises:
        FaultSpecError: ``name`` is not a valid point name.
        ValueError: ``name`` was already declared with a different description.
    """
    check_point_name(name)
    with _lock:
        old = _points.get(name)
        if old is not None and old != description:
            raise ValueError(
                f"fault point {name!r} already declared as {old!r}, not {description!r}"
            )
        _points[name] = description
    return name


def declared_points() -> dict[str, str]:
    """A copy of the registry: point name → description, in declaration order, with the points
    of every installed package's ``twopc.fault_points`` entry point."""
    global _packages_read
    if not _packages_read:
        for entry in entry_points(group=ENTRY_POINT_GROUP):
            for name, description in entry.load().items():
                declare(name, description)
        _packages_read = True
    with _lock:
        return dict(_points)
