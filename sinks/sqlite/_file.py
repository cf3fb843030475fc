"""The SQLite file a URL names, checked before the first connection (sqlite3's own errors name
neither the path nor the fix)."""

from __future__ import annotations

import os

from twopc import ConfigurationError

__all__ = ["check_sqlite_file"]

_HEADER = b"SQLite format 3\x00"  #: the first 16 bytes of every SQLite 3 database file


def check_sqlite_file(database: str | None) -> None:
    """Refuse a path whose folder is missing, that is a folder, or a file but not a SQLite database; nothing is
    created. URI filenames and in-memory databases are left to sqlite3. Raises ``ConfigurationError``:
    naming the path and the fix."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = os.path.abspath(database)
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise ConfigurationError(
            f"the folder {folder} of the SQLite database {path} does not exist: create the folder (twopc creates "
            f"the database file, not its folder), or fix the path in the url; nothing was created")
    if os.path.isdir(path):
        raise ConfigurationError(
            f"the SQLite database path {path} is a folder: point the url at a SQLite database file, or at a new "
            f"file's path in an existing folder (twopc creates the database there); nothing was written")
    try:
        with open(path, "rb") as f:
            head = f.read(len(_HEADER))
    except FileNotFoundError:
        return  # sqlite3 creates it
    except OSError as exc:
        raise ConfigurationError(f"cannot read the SQLite database {path} ({exc.strerror}): give twopc's user "
                                 f"read and write access to it and its folder; nothing was written") from None
    if head and head != _HEADER:
        raise ConfigurationError(
            f"{path} is not a SQLite database (it does not start with the SQLite header): point the url at a "
            f"SQLite database file, or at a path where no file exists yet (twopc creates the database there); "
            f"nothing was written")
