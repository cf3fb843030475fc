"""A folder twopc must create where a file stands: name the file, what needs the folder, and the fix."""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["file_in_the_way", "make_folder"]


def make_folder(path: str, error: Callable[[str], Exception], *, needs: str, fix: str) -> None:
    """Create the folder *path* and its parents.
    Raises Exception: ``error(message)`` when a file stands at *path* or a parent (naming it,
    *needs* and *fix*; nothing was written).
    Raises OSError: any other failure."""
    try:
        os.makedirs(path, exist_ok=True)
    except (NotADirectoryError, FileExistsError) as exc:
        raise error(file_in_the_way(path, needs=needs, fix=fix)) from exc


def file_in_the_way(path: str, *, needs: str, fix: str) -> str:
    """The message for a file at *path* or a parent where *needs* needs a folder."""
    blocker = path
    while blocker not in ("/", "") and not os.path.isfile(blocker):
        blocker = os.path.dirname(blocker)
    return (f"{blocker} is a file, but {needs} needs a folder there ({path}): {fix}, or move the file away; "
            f"nothing was written")
