"""The name rule shared by fault points and control targets: ``[A-Za-z_][A-Za-z0-9_.-]*``."""

from __future__ import annotations

import re
from typing import Final

from ._errors import GRAMMAR, FaultSpecError

NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*\Z")


def check_point_name(name: str) -> str:
    """Return ``name`` if it is a valid fault-point name, else raise :class:`FaultSpecError`."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise FaultSpecError(f"bad fault point name {name!r}: must match [A-Za-z_][A-Za-z0-9_.-]*; {GRAMMAR}")
    return name
