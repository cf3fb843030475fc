"""The driver side of a prepared-transaction SQL sink: commit and abort by transaction id,
listing a sink's prepared transactions, purging markers. Each prepared transaction writes one
marker row with its data, so a commit that finds its transaction gone tells "already committed"
(marker present) from "lost" (absent), which the database answers the same way."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from twopc import CommitOutcome, SinkError, TransactionHandle, Xid
from twopc.spi import ProtocolError, SinkUnavailableError, TargetConfigurationError

from .._handles import PreparedSqlHandle
from ._sql_dialect import SqlDialect
from ._sql_target import SqlTarget

if TYPE_CHECKING:
    from twopc.spi import Headroom, PreparedDetail

    from ._column_match import TableColumn

__all__ = ["MARKER_COLUMNS", "MarkerTable", "PreparedCommitter"]

log = logging.getLogger("twopc.sinks.sql")

#: Columns every marker table has (the DDL adds ``prepared_at``).
MARKER_COLUMNS = ("gid", "sink_id", "batch_id", "partition_id", "rows")


class MarkerTable:
    """The marker rows of one sink's target, read on the control connection."""

    def __init__(self, target: SqlTarget) -> None:
        self.target = target

    def ensure(self, dbapi: Any, dialect: SqlDialect[Any]) -> None:
        """Check the marker table's columns or create it, then the dialect's own tables. Raises
        ``TargetConfigurationError``: the table is not a marker table, or cannot be created."""
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
        """Whether *gid*'s marker row exists (``False`` without the table)."""
        return bool(self.among([gid]))

    def among(self, gids: Sequence[str]) -> set[str]:
        """Which of *gids* have a marker row (were committed), in one query per 1,000 ids."""
        t = self.target
        found: set[str] = set()
        for i in range(0, len(gids), 1000):
            chunk = gids[i:i + 1000]
            rows = t.read_if_exists(f"SELECT {t.quote('gid')} FROM {t.qualified(t.marker)} WHERE {t.quote('gid')} "
                                    f"IN ({', '.join(['%s'] * len(chunk))})", chunk, "read the marker table")
            found.update(str(r[0]) for r in rows)
        return found


C = TypeVar("C", bound="TableColumn")
H = TypeVar("H", bound=PreparedSqlHandle)


class PreparedCommitter(Generic[C, H]):
    """Finish prepared transactions from any process that has the handles (the driver side of
    :class:`~twopc.sinks.sql._prepared_sink.PreparedSqlSink`, which sets the attributes below)."""

    target: SqlTarget  #: the database, its control connection and error mapping
    dialect: SqlDialect[C]  #: the database's SQL
    __handle_type__: ClassVar[type[Any]]  #: the handle class :meth:`list_prepared` makes
    markers: MarkerTable  #: the marker rows, which tell a replayed commit from a lost transaction

    def _checked_gid(self, handle: TransactionHandle) -> str:
        database = self.target.database
        return Xid.checked(handle.txn_id, max_bytes=database.max_id_bytes,
                           what=f"twopc {database.product} {database.id_name}")

    def commit(self, handle: H) -> CommitOutcome:
        """Commit the handle's prepared transaction from the control connection: ``COMMITTED``;
        ``ALREADY_COMMITTED`` when the id is unknown and its marker row exists; ``LOST`` when neither
        (rolled back). Raises ``ProtocolError``: the handle's id is malformed; ``SinkUnavailableError`` /
        ``SinkError``: the server failed; a retry answers truthfully."""
        gid = self._checked_gid(handle)
        if self._finish_truthfully("COMMIT", gid):
            return CommitOutcome.COMMITTED
        return CommitOutcome.ALREADY_COMMITTED if self.markers.exists(gid) else self._lost(gid)

    def _lost(self, gid: str) -> CommitOutcome:
        log.error("twopc: %s is neither prepared nor committed on %s", gid, self.target.table_label)
        return CommitOutcome.LOST

    def commit_all(self, handles: Sequence[H], *, recovering: bool = False) -> list[CommitOutcome]:
        """Commit one decided batch's *handles* in round trips that do not grow with their count
        where the dialect can (:meth:`SqlDialect.finish_many`), then one marker lookup; per handle,
        in order, :meth:`commit`'s outcome. Raises ``ProtocolError``: a handle's id is malformed (nothing
        was sent); ``SinkUnavailableError`` / ``SinkError``: the server failed; a retry answers
        ``ALREADY_COMMITTED`` for those committed."""
        gids = [self._checked_gid(h) for h in handles]
        if not gids:
            return []
        finished = self.dialect.finish_many("COMMIT", gids, recovering=recovering)
        unknown = [g for g, done in zip(gids, finished, strict=True) if not done]
        committed_before = self.markers.among(unknown) if unknown else set()
        return [CommitOutcome.COMMITTED if done else
                CommitOutcome.ALREADY_COMMITTED if gid in committed_before else self._lost(gid)
                for gid, done in zip(gids, finished, strict=True)]

    def abort(self, handle: H) -> None:
        """Roll back the handle's prepared transaction; an id that is already gone is fine. Raises ``ProtocolError``:
        the id is malformed, or gone with its marker row (it was committed); ``SinkError`` / ``SinkUnavailableError``:
        the server failed; retry."""
        gid = self._checked_gid(handle)
        if self._finish_truthfully("ROLLBACK", gid):
            return
        if self.markers.exists(gid):
            raise ProtocolError(f"asked to roll back {gid}, but it was already committed to {self.target.table_label} "
                                f"(its marker row exists)")

    def _finish_truthfully(self, verb: str, gid: str) -> bool:
        """:meth:`SqlDialect.finish`, whose failure message says the transaction's state as the
        server reports it afterwards (never "rolled back" by default) and what to do."""
        try:
            return self.dialect.finish(verb, gid)
        except SinkUnavailableError:
            raise
        except SinkError as exc:
            from ._errors import ROLLED_BACK  # a failed commit's: one that succeeds maps no error
            reason = str(exc).replace(ROLLED_BACK, "").rstrip(". ")
            raise SinkError(f"{reason}. {self._state_after_failed_finish(verb, gid)}") from None

    def _state_after_failed_finish(self, verb: str, gid: str) -> str:
        try:
            still = gid in self.dialect.prepared_ids(gid)
            other = None if still else self.dialect.prepared_elsewhere(gid)
            committed = not still and other is None and self.markers.exists(gid)
        except (SinkError, self.target.database.driver_error):
            return (f"Whether {gid} is still prepared could not be read; `twopc status <checkpointLocation>` "
                    f"shows it. Fix the cause and rerun")
        if still or other is not None:
            where = f" in {other}" if other is not None else ""
            fix = ("connect to that database (the url must name the database the batch was prepared in) and "
                   "rerun" if other is not None
                   else "fix the cause and rerun, or run `twopc recover <checkpointLocation>`")
            return (f"The transaction {gid} is still prepared{where}, holding its rows and locks; nothing was "
                    f"{'committed' if verb == 'COMMIT' else 'rolled back'}, and it can still be "
                    f"{'committed' if verb == 'COMMIT' else 'rolled back'}: {fix}")
        if committed:
            return f"The transaction {gid} is no longer prepared: it was committed (its marker row exists)"
        return f"The transaction {gid} is no longer prepared and was not committed: it was rolled back"

    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> list[H]:
        """Prepared transactions of *sink_id* (and *batch_id*), their ``rows`` ``-1`` (unknown)."""
        prefix = Xid.prefix(sink_id)
        with self.target.mapped("list prepared transactions"):
            gids = self.dialect.prepared_ids(prefix)
        out = []
        for gid in sorted(g for g in gids if g.startswith(prefix)):
            h = self.parse_gid(gid)
            if h is None or h.sink_id != sink_id:
                log.warning("twopc: ignoring prepared transaction with malformed id %r", gid)
                continue
            if batch_id is None or h.batch_id == batch_id:
                out.append(h)
        return out

    def prepared_details(self, sink_id: str) -> list[PreparedDetail]:
        """:meth:`list_prepared` with when each was prepared, where the server records it (not XA)."""
        from twopc.spi import PreparedDetail  # twopc status's: a write's workers never build one
        handles = self.list_prepared(sink_id)
        with self.target.mapped("read when transactions were prepared"):
            since = self.dialect.prepared_since(Xid.prefix(sink_id)) if handles else {}
        return [PreparedDetail(h, "prepared transaction", since.get(h.txn_id)) for h in handles]

    def headroom(self, sink_id: str) -> Headroom | None:
        """Prepared transactions the server holds for every user, against its limit."""
        with self.target.mapped("count prepared transactions"):
            return self.dialect.headroom()

    def parse_gid(self, gid: str) -> H | None:
        """Rebuild a handle from a transaction id (``None`` if it is not a canonical twopc id)."""
        xid = Xid.parse(gid)
        if xid is None or xid.text != gid:
            return None
        return self.__handle_type__(gid, xid.sink_id, xid.batch_id, xid.partition_id,
                                xid.attempt_id, table=self.target.table_label, rows=-1)

    def purge_markers(self, sink_id: str, below_batch: int) -> int:
        """Delete the marker rows of *sink_id*'s batches ``< below_batch``; returns how many.

        Purge only batches older than every batch the ledger holds: a purged batch's replayed
        commit would be reported ``LOST``."""
        t = self.target
        with t.mapped(f"purge markers from {t.marker_label}"):
            count, _rows = t.control_execute(
                f"DELETE FROM {t.qualified(t.marker)} WHERE {t.quote('sink_id')} = %s "
                f"AND {t.quote('batch_id')} < %s", (sink_id, below_batch))
        return count
