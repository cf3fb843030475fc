"""The marker table of a prepared-transaction SQL sink: checked at validation, and read.

Each prepared transaction writes one marker row (committed atomically with its data), so
that a commit that finds its transaction gone can tell "already committed" (marker present)
from "lost" (absent): the database answers both the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from twopc.spi import TargetConfigurationError

from ..database._sql_dialect import SqlDialect
from ..database._sql_target import SqlTarget

__all__ = ["MARKER_COLUMNS", "MarkerTable"]

log = logging.getLogger("twopc.sinks.sql")

#: Columns every marker table has (the DDL adds ``prepared_at``).
MARKER_COLUMNS = ("gid", "sink_id", "batch_id", "partition_id", "rows")


class MarkerTable:
    """The marker rows of one sink's target (``target.marker``), read and purged on the
    target's control connection."""

    def __init__(self, target: SqlTarget) -> None:
        self.target = target

    def ensure(self, dbapi: Any, dialect: SqlDialect[Any]) -> None:
        """Check the marker table has the marker columns, or create it (then the dialect's
        own tables: :meth:`SqlDialect.ensure_own_tables`).

        Raises:
            TargetConfigurationError: a table of that name is not a marker table, or it
                cannot be created.
        """
        have = dialect.marker_columns(dbapi)
        if have is None:
            dialect.create_markers(dbapi)
            log.info("twopc: created marker table %s", self.target.marker_label)
        else:
            missing = [c for c in MARKER_COLUMNS if c not in {h.lower() for h in have}]
            if missing:
                raise TargetConfigurationError(
                    f"{self.target.marker_label} exists but is not a twopc marker table (it lacks columns "
                    f"{', '.join(missing)}): set option markerTable to another name")
        dialect.ensure_own_tables(dbapi)

    def exists(self, gid: str) -> bool:
        """Whether *gid*'s marker row exists (``False`` when the table does not).

        Raises:
            SinkError / SinkUnavailableError: the server failed.
        """
        return bool(self.among([gid]))

    def among(self, gids: Sequence[str]) -> set[str]:
        """Which of *gids* have a marker row (were committed), in one query per 1,000 ids."""
        t = self.target
        found: set[str] = set()
        for i in range(0, len(gids), 1000):
            chunk = gids[i:i + 1000]
            try:
                _n, rows = t.control_execute(
                    f"SELECT {t.quote('gid')} FROM {t.qualified(t.marker)} WHERE {t.quote('gid')} "
                    f"IN ({', '.join(['%s'] * len(chunk))})", chunk, fetch=True)
            except t.database.driver_error as exc:
                if t.is_missing_table(exc):
                    return found
                raise t.map_error(exc, "read the marker table") from None
            found.update(str(r[0]) for r in rows)
        return found
