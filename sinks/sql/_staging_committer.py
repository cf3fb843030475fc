"""The driver side of the staging mode: one local transaction moves a batch's staged rows into
the target and writes the batch marker (its own decision); abort deletes an attempt's staged rows."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from twopc import CommitOutcome, TransactionHandle, TransactionLostError, Xid
from twopc.spi import ProtocolError, SchemaMismatchError, TargetConfigurationError

from .._handles import StagingHandle
from ._staging_ddl import StagingDdl
from ._staging_statements import move_sql, sql_string
from ._staging_tables import TXN_COLUMN

__all__ = ["StagingCommitter"]

log = logging.getLogger("twopc.sinks.staging")

#: SQLSTATEs on which the commit deletes its staged rows instead (lock_not_available, insufficient_privilege)
_FALL_BACK_TO_DELETE = frozenset({"55P03", "42501"})
#: below this many rows staged rows are deleted: TRUNCATE's fixed cost made small commits ~5 ms slower
TRUNCATE_FROM_ROWS = 10_000
#: how an overwrite empties an existing target (:meth:`StagingTables.replaced_by`)
_EMPTY_BY = {"drop": "DROP TABLE", "truncate": "TRUNCATE TABLE", "delete": "DELETE FROM"}


class StagingCommitter(StagingDdl):
    """Commit, abort and list the staged attempts of a staging sink."""

    def _checked(self, handle: TransactionHandle) -> str:
        if not isinstance(handle, StagingHandle):
            raise ProtocolError(f"handle {handle.txn_id!r:.80} is not a twopc staging transaction")
        return Xid.checked(handle.txn_id, what="twopc staging transaction")

    def commit(self, handle: StagingHandle) -> CommitOutcome:
        """Commit one handle as a batch of its own (the runtime uses :meth:`commit_all`)."""
        return self.commit_all([handle])[0]

    def commit_all(self, handles: Sequence[StagingHandle], *, recovering: bool = False) -> list[CommitOutcome]:
        """Move one batch's chosen attempts' rows into the target and write the batch marker, in one local transaction.
        Idempotent: ``ALREADY_COMMITTED`` for each when the marker exists. Raises ``TransactionLostError``: an attempt's
        staged rows are missing or incomplete; nothing was written; ``SinkError``: the database refused (the message
        names the constraint); nothing was written; ``SinkUnavailableError``: the connection failed; a retry answers
        truthfully."""
        if not handles:
            return []
        ids = [self._checked(h) for h in handles]
        batch_ids = {(h.sink_id, h.batch_id) for h in handles}
        if len(batch_ids) != 1:
            raise ProtocolError(f"commit_all takes handles of one batch, got {sorted(batch_ids)}")
        sink_id, batch_id = batch_ids.pop()
        with self.session(f"commit batch {batch_id} into {self.table.display()}") as conn:
            self.begin(conn)
            d = conn.dialect
            marker = conn.execute(sa.text(
                f"SELECT {self.q('rows')} FROM {self.batches.quoted(d)} WHERE sink_id = :s AND batch_id = :b"),
                {"s": sink_id, "b": batch_id}).first()
            if marker is not None:
                self.delete_staged_rows(conn, ids)
                conn.commit()
                return [CommitOutcome.ALREADY_COMMITTED] * len(handles)
            counts: dict[str, int] = dict(conn.execute(
                sa.text(f"SELECT {self.q(TXN_COLUMN)}, count(*) FROM {self.stage.quoted(d)} "
                        f"WHERE {self.q(TXN_COLUMN)} IN :ids GROUP BY {self.q(TXN_COLUMN)}")
                .bindparams(sa.bindparam("ids", expanding=True)), {"ids": ids}).all())
            bad = [h.txn_id for h in handles if counts.get(h.txn_id, 0) != h.rows and not
                   (h.rows < 0 and counts.get(h.txn_id, 0) > 0)]
            if bad:
                conn.rollback()
                raise TransactionLostError(
                    f"batch {batch_id} of sink {sink_id!r}: staged rows of {bad} are missing from "
                    f"{self.stage.display()} (were they deleted?); nothing was written to {self.table.display()}")
            total = sum(counts.values())
            self._move(conn, ids, total, self._write_of(handles))
            conn.execute(sa.text(f"INSERT INTO {self.batches.quoted(d)} "
                                 f"(sink_id, batch_id, {self.q('rows')}, committed_at) "
                                 f"VALUES (:s, :b, :r, :t)"),
                         {"s": sink_id, "b": batch_id, "r": total,
                          "t": dt.datetime.now(dt.UTC).replace(tzinfo=None)})
            conn.commit()
        log.info("twopc staging: committed batch %s of %s: %s rows into %s", batch_id, sink_id, total,
                 self.table.display())
        return [CommitOutcome.COMMITTED] * len(handles)

    def _write_of(self, handles: Sequence[StagingHandle]) -> str:
        """What the commit does to the target, as the handles recorded it, else this sink's configuration."""
        recorded = {h.write for h in handles if h.write}
        if len(recorded) > 1:
            raise ProtocolError(f"the handles of one batch disagree on the write ({sorted(recorded)}): "
                                f"they were not staged by one write")
        return recorded.pop() if recorded else self.commit_write()

    def _move(self, conn: Connection, ids: list[str], rows: int, write: str) -> None:
        """The *write*'s DDL, the statement that moves the chosen rows, their deletion from staging."""
        d = conn.dialect
        t = self.table.quoted(d)
        exists = self.has_table(conn, self.table)
        if write == "errorifexists" and exists:
            raise TargetConfigurationError(
                f"table {self.table.display()} was created by someone else while this write ran, and the "
                f"save mode is errorifexists: nothing was written")
        if write == "ignore" and exists:
            self.delete_staged_rows(conn, ids)
            log.info("twopc staging: %s exists and the save mode is ignore: wrote nothing", self.table.display())
            return
        if write == "drop" and exists and self.schema is None:
            raise SchemaMismatchError(
                f"this batch overwrites {self.table.display()} by re-creating it from the DataFrame (overwrite "
                f"without truncate), and this process does not know the DataFrame's schema (recovery without the "
                f"write): rerun the write or restart the query (its recovery finishes the batch); nothing was written")
        if write in _EMPTY_BY and exists:
            conn.exec_driver_sql(f"{_EMPTY_BY[write]} {t}")
            exists = write != "drop"
        if not exists:
            if self.schema is None:
                raise SchemaMismatchError(
                    f"{self.table.display()} does not exist and this process does not know the DataFrame "
                    f"schema to create it (recovery without a query): create the table, then recover")
            conn.exec_driver_sql(self.create_ddl(conn))
            if self.options.table_comment and self.dialect.table_comments == "comment on":
                comment = sql_string(self.options.table_comment, backslash=False)
                conn.exec_driver_sql(f"COMMENT ON TABLE {t} IS {comment}")
        stage_cols = [c["name"] for c in sa.inspect(conn).get_columns(self.stage.name, schema=self.stage.schema)
                      if c["name"] != TXN_COLUMN]
        table_cols = [c["name"] for c in sa.inspect(conn).get_columns(self.table.name, schema=self.table.schema)]
        mapping = []
        for s in stage_cols:
            exact = [c for c in table_cols if c == s] or [c for c in table_cols if c.lower() == s.lower()]
            if len(exact) != 1:
                raise SchemaMismatchError(f"staged column {s} matches no single column of {self.table.display()}")
            mapping.append((s, exact[0]))
        stmt = move_sql(self.dialect_name, self.q, t, self.stage.quoted(d), mapping, self.options.upsert_keys)
        conn.execute(sa.text(stmt).bindparams(sa.bindparam("ids", expanding=True)), {"ids": ids})
        if rows < TRUNCATE_FROM_ROWS or not self._truncate_staged(conn, ids):
            self.delete_staged_rows(conn, ids)

    def _truncate_staged(self, conn: Connection, ids: list[str]) -> bool:
        """Empty the staging table with ``TRUNCATE`` in the commit transaction when it provably holds only *ids*' rows;
        whether it did. ``TRUNCATE`` avoids ``DELETE``'s WAL and dead rows; ``LOCK ... NOWAIT`` succeeds only when no
        other transaction (a staging task) holds the table, else the savepoint is rolled back and the caller deletes."""
        if not self.dialect.truncates_in_transaction:
            return False
        # only a statement snapshot taken after the lock sees every row committed before it
        if conn.exec_driver_sql("SHOW transaction_isolation").scalar() not in ("read committed", "read uncommitted"):
            return False
        stage, col = self.stage.quoted(conn.dialect), self.q(TXN_COLUMN)
        savepoint = conn.begin_nested()
        try:
            conn.exec_driver_sql(f"LOCK TABLE {stage} IN ACCESS EXCLUSIVE MODE NOWAIT")
            other = conn.execute(sa.text(f"SELECT 1 FROM {stage} WHERE {col} NOT IN :ids LIMIT 1")
                                 .bindparams(sa.bindparam("ids", expanding=True)), {"ids": ids}).first()
            if other is None:
                conn.exec_driver_sql(f"TRUNCATE TABLE {stage}")
                savepoint.commit()
                return True
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) not in _FALL_BACK_TO_DELETE:
                raise
        savepoint.rollback()
        return False

    def abort(self, handle: StagingHandle) -> None:
        """Delete an attempt's staged rows. Idempotent. Raises ``ProtocolError``: the handle is not a staging handle;
        ``SinkError`` / ``SinkUnavailableError``: the database failed; retry."""
        self.delete_staged([self._checked(handle)])

    def delete_staged(self, txn_ids: Sequence[str]) -> None:
        """Delete the staged rows of the attempts *txn_ids* (checked ids) in one statement. Idempotent. Raises
        ``SinkError``/``SinkUnavailableError``: the database failed; retry."""
        what = txn_ids[0] if len(txn_ids) == 1 else f"{len(txn_ids)} attempts"
        with self.session(f"delete staged rows of {what}") as conn:
            self.begin(conn)
            if self.has_table(conn, self.stage):
                self.delete_staged_rows(conn, txn_ids)
            conn.commit()
