"""This user's private folders in the temporary directory, for what twopc keeps on a host
while a driver runs (the metrics server's registry, the lease records of streaming queries,
the driver agents' sockets).

:func:`private_dir` makes ``<temp dir>/<name>-<uid>``: the uid in the name keeps two users
of one machine apart, mode ``0700`` keeps other users out, and a folder that is not this
user's alone (made by someone else in a shared temp dir, or opened up later) is refused
rather than used.
"""

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
    """``<temp dir>/<name>-<uid>[/<part>...]``, each level made ``0700`` when missing; None
    when one of them is not this user's alone (see :func:`is_private`) or cannot be made."""
    folder = Path(tempfile.gettempdir()) / f"{name}-{os.getuid()}"
    for level in (folder, *(folder.joinpath(*parts[:i + 1]) for i in range(len(parts)))):
        with contextlib.suppress(OSError):
            level.mkdir(mode=0o700)
        if not is_private(level):
            return None
        folder = level
    return folder
