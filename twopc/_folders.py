"""The one rule for a folder twopc must create where a file stands (a checkpoint folder, the
file sink's output folder): name the file in the way, the option that chose the place, and
the fix; nothing was written."""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["file_in_the_way", "make_folder"]


def make_folder(path: str, error: Callable[[str], Exception], *, needs: str, fix: str) -> None:
    """Create the folder *path* and its parents (an existing folder is fine).

    Raises:
        Exception: ``error(message)`` when a file stands at *path* or at one of its
            parents: the message names that file, *needs* (what needs the folder), *fix*,
            and says nothing was written.
        OSError: any other failure, as raised.
    """
    try:
        os.makedirs(path, exist_ok=True)
    except (NotADirectoryError, FileExistsError) as exc:
        raise error(file_in_the_way(path, needs=needs, fix=fix)) from exc


def file_in_the_way(path: str, *, needs: str, fix: str) -> str:
    """The message for a file standing at *path* or at one of its parents, where *needs*
    needs a folder (also for a read-only look that found it: nothing is written either way)."""
    blocker = path
    while blocker not in ("/", "") and not os.path.isfile(blocker):
        blocker = os.path.dirname(blocker)
    return (f"{blocker} is a file, but {needs} needs a folder there ({path}): {fix}, or move the file away; "
            f"nothing was written")
