"""This user's private folders in the temp dir (metrics registry, lease records, agent sockets):
``<temp dir>/<name>-<uid>``, mode ``0700``; one that is not this user's alone is refused."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

__all__ = ["is_private", "private_dir"]


def is_private(path: Path) -> bool:
    """Whether *path* is a folder (not a link) of this user's that no one else may open."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def private_dir(name: str, *parts: str) -> Path | None:
    """``<temp dir>/<name>-<uid>[/<part>...]``, each level made ``0700``; None when one is not this
    user's alone or cannot be made."""
    folder = Path(tempfile.gettempdir()) / f"{name}-{os.getuid()}"
    for level in (folder, *(folder.joinpath(*parts[:i + 1]) for i in range(len(parts)))):
        with contextlib.suppress(OSError):
            level.mkdir(mode=0o700)
        if not is_private(level):
            return None
        folder = level
    return folder
