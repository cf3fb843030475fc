"""PostgreSQL two-phase-commit sink (``twopc-postgres``): each task attempt COPYs its rows, writes a
marker row and ``PREPARE TRANSACTION``\\ s it under a :class:`twopc.Xid`; the driver runs ``COMMIT
PREPARED``. The protocol is :class:`~twopc.sinks.sql.PreparedSqlSink`'s; this module adds the
prepared-transaction slots (:mod:`twopc.sinks.postgres._slots`) and the drop-in's move of staged rows.

The server needs ``max_prepared_transactions`` > 0 (at least a batch's partitions plus retried
attempts), ``INSERT`` on the table, and ``CREATE`` on the marker table's schema the first time
(or :meth:`PostgresPrepared.marker_table_ddl`). Options: ``twopc-jdbc``'s."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from twopc import TransactionContext, TransactionLostError

from .._handles import PostgresHandle
from ..sql._names import TableName
from ..sql._prepared_sink import PreparedSqlSink
from ..sql._sql_dialect import SqlTxn
from ._prepared import PostgresPrepared
from ._server import PgColumn, identifier

if TYPE_CHECKING:
    from ._slots import Claim

__all__ = ["PostgresHandle", "PostgresSink"]


class PostgresSink(PreparedSqlSink[PgColumn, PostgresHandle]):
    """Exactly-once appends to one PostgreSQL table through ``PREPARE TRANSACTION``.

    Args:
        url: a ``jdbc:postgresql://`` or SQLAlchemy URL (other PostgreSQL drivers become psycopg 3).
        table: ``[schema.]table`` in PostgreSQL syntax (quote mixed-case names).
        **options: ``twopc-jdbc``'s options as keywords, e.g. ``lock_timeout`` (how long a task waits for
            rows a prepared transaction of an earlier attempt locked), ``copy_format`` (``"auto"``,
            ``"binary"``, ``"csv"``).

    Raises:
        ConfigurationError: an argument is invalid."""

    __handle_type__ = PostgresHandle
    database = PostgresPrepared
    dialect_type = PostgresPrepared
    dialect: PostgresPrepared

    def begin_transaction(self, context: TransactionContext) -> SqlTxn[PgColumn]:
        """Open the attempt's transaction with a prepared-transaction slot claimed before any row.

        Raises:
            TargetConfigurationError: every slot is taken; nothing was written (names the limit and fixes).
            SinkUnavailableError / SinkError: see :meth:`PreparedSqlSink.begin_transaction`."""
        txn, claim = self.begin_with_slot(context, keep_driver_slot=False)
        if txn is None:
            from ._errors import no_free_slot  # a refusal's: a task that has a slot maps no error
            raise no_free_slot(self.target.where(), self.target.table_label, context.partition_id, claim.limit,
                               claim.keys)
        return txn

    def begin_with_slot(self, context: TransactionContext, *,
                        keep_driver_slot: bool) -> tuple[SqlTxn[PgColumn] | None, Claim]:
        """Open the attempt's transaction with a slot claimed, or, when every slot is taken, ``None``
        and what the claim found; *keep_driver_slot* leaves slot 0 to the write's driver.

        Raises:
            SinkUnavailableError / SinkError: see :meth:`PreparedSqlSink.begin_transaction`."""
        from ._slots import claim_slot  # a task's and a moving driver's: a commit claims no slot
        txn = super().begin_transaction(context)
        claim = self._claim(txn, functools.partial(claim_slot, keep_driver_slot=keep_driver_slot))
        if claim.slot is None:
            self.rollback(txn)
            return None, claim
        return txn, claim

    def begin_move(self, context: TransactionContext) -> SqlTxn[PgColumn]:
        """The driver's transaction that takes over staged rows (:meth:`load_staged`), with a free slot,
        else slot 0 waited for up to ``lockTimeout``.

        Raises:
            SinkUnavailableError / SinkError: no connection, or no slot in time."""
        from ._slots import wait_for_driver_slot  # as in begin_with_slot
        txn = super().begin_transaction(context)
        self._claim(txn, wait_for_driver_slot)
        return txn

    def _claim(self, txn: SqlTxn[PgColumn], claim: Callable[[psycopg.Connection[Any]], Claim]) -> Claim:
        with self.rolling_back(txn, "claim a prepared-transaction slot"):
            return claim(self.usable(txn))

    def load_staged(self, txn: SqlTxn[PgColumn], stage: TableName, names: Sequence[str],
                    txn_ids: Sequence[str], rows: int) -> None:
        """Copy the *rows* rows the attempts *txn_ids* staged in *stage* (columns *names*) into the
        table inside *txn*; the staged rows stay until the caller deletes them after the commit.

        Raises:
            TransactionLostError: not *rows* rows are staged (rolled back: nothing written).
            SchemaMismatchError: a staged column matches no column of the table.
            SinkError: the server refused (a constraint...): rolled back, nothing written."""
        pg: psycopg.Connection[Any] = self.usable(txn)
        cols = self.target.match(list(names), None, txn.columns, check_types=False, check_required=False)
        stmt = sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} WHERE twopc_txn = ANY(%s)").format(
            identifier(self.target.table), sql.SQL(", ").join(sql.Identifier(c.name) for c in cols),
            sql.SQL(", ").join(sql.Identifier(n) for n in names), identifier(stage))
        with self.rolling_back(txn, f"move staged rows from {stage.display()} into {self.target.table_label}"):
            copied = pg.execute(stmt, (list(txn_ids),)).rowcount
        if copied != rows:
            self.abandon(txn, TransactionLostError("staged rows missing"))
            raise TransactionLostError(
                f"{stage.display()} holds {copied} staged rows of the attempts {list(txn_ids)[:5]}"
                f"{'...' if len(txn_ids) > 5 else ''}, not the {rows} their tasks reported (were they deleted?): "
                f"nothing was written to {self.target.table_label}; the batch fails")
        txn.rows += copied
