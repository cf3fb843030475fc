"""PostgreSQL two-phase-commit sink (``twopc-postgres``): each task attempt COPYs its rows
(:mod:`twopc.sinks.postgres._copy`), writes a marker row and ``PREPARE TRANSACTION``\\ s it under a
:class:`twopc.Xid`; the driver runs ``COMMIT PREPARED``. The protocol is
:class:`~twopc.sinks.sql.PreparedSqlSink`'s; this module adds the prepared-transaction slots
(:mod:`twopc.sinks.postgres._slots`) and the drop-in's move of staged rows.

Requirements on the server: ``max_prepared_transactions`` > 0 (at least the partitions of a
batch plus retried attempts: a task that finds no free slot fails with nothing written),
``INSERT`` on the target table, and ``CREATE`` on the marker table's schema the first time
(or create it yourself: :meth:`PostgresPrepared.marker_table_ddl`). Options: ``twopc-jdbc``'s
(:mod:`twopc.sinks.sql.options._jdbc_options`), appending to an existing table.
"""

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
        url: a ``jdbc:postgresql://`` URL or a SQLAlchemy URL (``postgresql://``,
            ``postgresql+psycopg://``; other PostgreSQL drivers are replaced by psycopg 3).
        table: ``[schema.]table`` in PostgreSQL syntax (quote mixed-case names).
        **options: ``twopc-jdbc``'s options as keywords, e.g. ``lock_timeout`` (a task that
            meets rows locked by a prepared transaction of an earlier attempt fails after
            this time), ``copy_format`` (``"auto"``, ``"binary"``, ``"csv"``).

    Raises:
        ConfigurationError: an argument is invalid.
    """

    __handle_type__ = PostgresHandle
    database = PostgresPrepared
    dialect_type = PostgresPrepared
    dialect: PostgresPrepared

    # -- executor side -------------------------------------------------------------------
    def begin_transaction(self, context: TransactionContext) -> SqlTxn[PgColumn]:
        """Open the attempt's transaction and claim a prepared-transaction slot for it
        (:mod:`twopc.sinks.postgres._slots`) before any row is loaded.

        Raises:
            TargetConfigurationError: every slot is taken; nothing was written (the
                message gives the server's limit and the fixes).
            SinkUnavailableError / SinkError: see :meth:`PreparedSqlSink.begin_transaction`.
        """
        txn, claim = self.begin_with_slot(context, keep_driver_slot=False)
        if txn is None:
            from ._errors import no_free_slot  # a refusal's: a task that has a slot maps no error

            raise no_free_slot(self.target.where(), self.target.table_label, context.partition_id, claim.limit,
                               claim.keys)
        return txn

    def begin_with_slot(self, context: TransactionContext, *,
                        keep_driver_slot: bool) -> tuple[SqlTxn[PgColumn] | None, Claim]:
        """Open the attempt's transaction with a prepared-transaction slot claimed, or, when
        every slot is taken, nothing (``None``, the connection given back) and what the
        claim found. A task of a write whose driver may prepare one more transaction
        after its tasks (*keep_driver_slot*) leaves slot 0 to it.

        Raises:
            SinkUnavailableError / SinkError: see :meth:`PreparedSqlSink.begin_transaction`.
        """
        from ._slots import claim_slot  # a task's and a moving driver's: a commit claims no slot

        txn = super().begin_transaction(context)
        claim = self._claim(txn, functools.partial(claim_slot, keep_driver_slot=keep_driver_slot))
        if claim.slot is None:
            self.rollback(txn)
            return None, claim
        return txn, claim

    def begin_move(self, context: TransactionContext) -> SqlTxn[PgColumn]:
        """The driver's transaction that takes over rows tasks staged (see
        :meth:`load_staged`), with a slot: a free one, else slot 0, which tasks leave to
        drivers, waited for up to ``lockTimeout``.

        Raises:
            SinkUnavailableError / SinkError: no connection, or no slot in time.
        """
        from ._slots import wait_for_driver_slot  # as in begin_with_slot

        txn = super().begin_transaction(context)
        self._claim(txn, wait_for_driver_slot)
        return txn

    def _claim(self, txn: SqlTxn[PgColumn], claim: Callable[[psycopg.Connection[Any]], Claim]) -> Claim:
        with self.rolling_back(txn, "claim a prepared-transaction slot"):
            return claim(self.usable(txn))

    def load_staged(self, txn: SqlTxn[PgColumn], stage: TableName, names: Sequence[str],
                    txn_ids: Sequence[str], rows: int) -> None:
        """Copy the rows that the attempts *txn_ids* staged in *stage* (columns *names*, the
        DataFrame's) into the table, inside *txn*; they must be *rows* rows. The staged rows
        stay (a plain read takes no row locks): the caller deletes them once the
        transaction committed, and until then they are what a rollback leaves.

        Raises:
            TransactionLostError: fewer or more rows than *rows* are staged (the
                transaction is rolled back: nothing was written).
            SchemaMismatchError: a staged column matches no column of the table.
            SinkError: the server refused (a constraint...): rolled back, nothing written.
        """
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
