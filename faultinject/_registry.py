"""Process-wide registry of declared fault-point names."""

from __future__ import annotations

import threading

from ._names import check_point_name

_lock = threading.Lock()
_points: dict[str, str] = {}


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
    """A copy of the registry: point name → description, in declaration order."""
    with _lock:
        return dict(_points)
