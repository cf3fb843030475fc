"""``twopc-jdbc``: a drop-in, exactly-once replacement for Spark's JDBC writer with two commit modes (the manual's
twopc-jdbc page describes both), logged with the reason: ``prepared``, where each task attempt loads its rows in a
transaction it prepares (:class:`~twopc.sinks.sql.PreparedSqlSink`), committed by the driver after its decision, for
appends to an existing table on a server that can prepare; and ``staging``, where each task attempt commits its rows
into a staging table, which the driver moves into the table in ONE local transaction
(:class:`~twopc.sinks.StagingSink`), on any database. ``commitMode=auto`` (the default) chooses ``prepared`` when
the write and the server allow it. On PostgreSQL a prepared-mode task claims a prepared-transaction slot first; in
``auto`` mode one that finds none stages its rows, which the driver moves into one more prepared transaction before
its decision (:meth:`JdbcSink.before_decision`); with ``commitMode=prepared`` it fails."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from twopc import CommitShape, ConfigurationError, SinkError, TransactionContext, TransactionHandle, TwoPhaseCommitSink
from twopc.spi import LedgerHost, ProtocolError, WriteSetup, capability
from twopc.spi.lease import TargetLedger, hold_for_prepare

from .._handles import StagingHandle
from ._engines import engine_for
from ._jdbc_modes import PREPARED, STAGING, SlotClaimingSink, TwoModeSink
from ._names import parse_table_name
from ._registry import dialect_for
from ._sql_target import SqlNamedTarget
from .options import JdbcOptions

if TYPE_CHECKING:
    import pyarrow as pa

    from twopc.spi import Headroom

__all__ = ["JdbcSink"]

log = logging.getLogger("twopc.sinks.jdbc")

_ANNOUNCED: set[tuple[str, str, str, bool]] = set()
#: (URL, table, stage, schema) whose staging this process validated (staging's checks cost ~30 ms)
_STAGING_READY: set[tuple[str, str, str, str]] = set()


class JdbcSink(TwoModeSink, WriteSetup, SqlNamedTarget, LedgerHost):
    """Exactly-once writes to a SQL table with Spark's JDBC writer options.

    Args:
        options: parsed options (:meth:`from_options` parses Spark's).

    :meth:`configure_write` or :meth:`validate` settles the commit mode, which travels to the executors with the pickled
    sink; handles say which mode made them (:class:`~twopc.sinks.sql._jdbc_modes.TwoModeSink`).
    """

    #: ``spark.twopc.twopcSchema`` sets ``twopcSchema`` for a whole session (see :func:`twopc.register`)
    __session_options__ = ("twopcSchema",)

    def __init__(self, options: JdbcOptions) -> None:
        super().__init__(options)
        self.reason = "commitMode=staging" if self.mode else ""
        self._checkpointed = True
        self._participant = False

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> JdbcSink:
        """Parse Spark's JDBC writer options (and twopc's). Raises ``MissingOptionError``: ``url`` or ``dbtable`` is
        missing; ``ConfigurationError``: an option is invalid or not supported."""
        return cls(JdbcOptions.parse(options))

    def describe(self) -> str:
        return (f"JDBC {self.options.safe_url()} table {self.options.table}"
                + (f" ({self.mode} mode)" if self.mode else ""))

    def _backend(self) -> TwoPhaseCommitSink[Any, Any, Any]:
        if self.mode == PREPARED:
            return self._prepared_sink()
        if self.mode == STAGING:
            return self._staging_sink()
        raise ProtocolError("JdbcSink: the commit mode is not settled (validate() settles it on the driver)")

    def configure_write(self, schema: pa.Schema, *, overwrite: bool, streaming: bool, checkpointed: bool) -> None:
        """Settle the save mode and whether this write needs the staging commit. Raises ``ConfigurationError``:
        ``saveMode`` contradicts Spark's mode, or ``commitMode=prepared`` with a write that needs staging."""
        o = self.options
        if overwrite and o.save_mode in ("errorifexists", "ignore"):
            raise ConfigurationError(f"saveMode {o.save_mode} contradicts Spark's mode overwrite: drop one of them")
        self.write_mode = "overwrite" if overwrite else (o.save_mode or "append")
        self.schema, self._overwrite, self._streaming = schema, self.write_mode == "overwrite", streaming
        reasons = []
        if not checkpointed and not self._has_prepared_mode():
            reasons.append("no checkpointLocation to record the commit decision in")
        self._checkpointed = checkpointed
        if self._overwrite and streaming:
            reasons.append('outputMode("complete") (each micro-batch replaces the rows in one transaction)')
        elif self.write_mode != "append":
            reasons.append(f"save mode {self.write_mode} (its DDL and rows commit in one transaction)")
        if o.upsert_keys:
            reasons.append("upsertKeys")
        if not self._has_prepared_mode():
            reasons.append(f"{o.dialect} has no prepared transactions twopc can use")
        if reasons:
            if o.commit_mode == PREPARED:
                raise ConfigurationError("commitMode=prepared cannot serve this write: " + "; ".join(reasons)
                                         + ". Use commitMode=auto or staging")
            self.mode, self.reason = STAGING, "; ".join(reasons) if o.commit_mode == "auto" else "commitMode=staging"
        if self._staging is not None:
            self._staging.configure_write(schema, overwrite=self._overwrite, streaming=streaming,
                                          checkpointed=checkpointed)

    def commit_shape(self, handles: Sequence[TransactionHandle] = ()) -> CommitShape:
        """Staging handles commit in one local transaction, others one by one; without handles: the mode."""
        staged = all(isinstance(h, StagingHandle) for h in handles) if handles else self.mode == STAGING
        return CommitShape.LOCAL_TRANSACTION if staged else CommitShape.PER_HANDLE

    def commit_may_be_refused(self) -> str | None:
        """The staging mode's reason (:meth:`StagingSink.commit_may_be_refused`), ``None`` in the prepared mode. Settles
        the mode first, so a composite can refuse a staging participant before validation creates anything; a sink asked
        never lets its prepared-mode tasks stage (a composite decides without :meth:`before_decision`). Raises
        ``SinkUnavailableError``: the mode is open and the server does not answer; ``ConfigurationError``:
        ``commitMode=prepared`` and the server cannot prepare."""
        self._participant = True
        self.may_stage = False
        self._settle_mode()
        return self._staging_sink().commit_may_be_refused() if self.mode == STAGING else None

    def _settle_mode(self) -> str:
        if self.mode is None:
            ok, why = self._server_can_prepare()
            if ok:
                self.mode, self.reason = PREPARED, why
            elif self.options.commit_mode == PREPARED:
                raise ConfigurationError(f"commitMode=prepared: {why}; or use commitMode=auto or commitMode=staging. "
                                         f"Nothing was written")
            else:
                self.mode, self.reason = STAGING, why
        return self.mode

    def validate(self, schema: pa.Schema) -> None:
        """Settle the commit mode, log it, and validate the target through it. Raises ``SinkUnavailableError``: no
        connection; ``TargetConfigurationError`` / ``SchemaMismatchError``: see the modes' ``validate``;
        ``ConfigurationError``: ``commitMode=prepared`` and the server cannot prepare."""
        self.schema = self.schema or schema
        mode = self._settle_mode()
        if mode == STAGING and self.options.dead_letter_table is not None:
            raise ConfigurationError(
                f"deadLetterTable needs the prepared commit mode, but this write uses staging ({self.reason}): "
                f"remove the option, or make the write one that can prepare (PostgreSQL, append)")
        capability(self._backend(), WriteSetup).validate(schema)
        how = ""
        if mode == PREPARED and dialect_for(self.options.dialect).stages_without_slot:
            how = self._prepare_staging(schema)
        if mode == PREPARED and not self.may_stage and not self._checkpointed:
            # a dead staging write (no checkpoint) to this target left staged rows: the next write cleans up
            self._staging_sink().expire_abandoned()
        announce = (self.options.safe_url(), self.options.table, mode, self.may_stage)
        if announce not in _ANNOUNCED:  # once per process: streaming validates every micro-batch
            _ANNOUNCED.add(announce)
            log.info("twopc-jdbc: %s commit mode for %s (%s%s)", self.mode, self.options.table, self.reason, how)

    def _prepare_staging(self, schema: pa.Schema) -> str:
        """Settle :attr:`may_stage` (``auto``, outside a composite: staging is validated here, before
        any task); returns what a task without a slot does, for the mode's log line."""
        if self.options.commit_mode != "auto" or self._participant:
            why = "commitMode=prepared" if self.options.commit_mode == PREPARED else "a composite's participant"
            return f"; a task that finds no free prepared-transaction slot fails before it writes ({why})"
        staging = self._staging_sink()
        ready = (self.options.safe_url(), self.options.table, staging.stage.display(), str(schema))
        if ready not in _STAGING_READY:
            try:
                staging.validate(schema)
            except (ConfigurationError, SinkError) as exc:
                self.may_stage = False
                return (f"; a task that finds no free prepared-transaction slot fails before it writes: it cannot "
                        f"stage instead ({exc})")
            _STAGING_READY.add(ready)
        elif not self._checkpointed:
            staging.expire_abandoned()  # what validate does for writes without a checkpoint
        self.may_stage = True
        return (f"; a task that finds no free prepared-transaction slot stages its rows in "
                f"{self._staging_sink().stage.display()}, and the driver moves them into one more prepared "
                f"transaction before its decision")

    def _server_can_prepare(self) -> tuple[bool, str]:
        o = self.options
        engine = engine_for(o.url, o.net_timeouts(), autocommit=False)
        table = parse_table_name(o.table, o.dialect)
        try:
            with engine.connect() as conn:
                if not sa.inspect(conn).has_table(table.name, schema=table.schema):
                    return False, f"table {table.display()} does not exist: staging creates it in the commit"
                dialect = dialect_for(o.dialect)  # one that cannot prepare says so (SqlDatabase.prepare_capacity)
                ok, why = dialect.prepare_capacity(conn, self._prepared_sink() if dialect.prepares else None)
                ledger = ("; an append to an existing table, decisions kept in the target's twopc_ledger table "
                          "(no checkpointLocation)") if ok and not self._checkpointed else ""
                return ok, why + ledger
        except SQLAlchemyError as exc:
            raise self._staging_sink().unavailable(exc) from None

    def target_ledger(self) -> TargetLedger | None:
        """The prepared mode's ledger table and leases; ``None`` on databases that cannot prepare."""
        return self._prepared_sink().target_ledger() if self._has_prepared_mode() else None

    def begin_transaction(self, context: TransactionContext) -> Any:
        """Open the attempt's transaction in the settled mode; when no prepared-transaction slot is free, stage the rows
        instead if :attr:`may_stage`, else fail. Raises ``ProtocolError``: the mode was not settled (``validate`` did
        not run); ``SinkUnavailableError``: no connection; ``TargetConfigurationError``: no free slot, and the write may
        not stage."""
        if self.mode == STAGING and (leases := self.target_ledger()) is not None:
            hold_for_prepare(leases, context.sink_id)  # the core API (the prepared mode's writer does it there)
        if not self.may_stage:
            return self._backend().begin_transaction(context)
        prepared = self._prepared_sink()
        assert isinstance(prepared, SlotClaimingSink)  # may_stage is set on PostgreSQL only
        txn, claim = prepared.begin_with_slot(context, keep_driver_slot=True)
        if txn is not None:
            return txn
        log.info("twopc-jdbc: partition %s (attempt %s) of batch %s stages its rows: no free prepared-transaction "
                 "slot on the server (max_prepared_transactions = %s; the %s that tasks may claim are all held)",
                 context.partition_id, context.attempt_id, context.batch_id, claim.limit, max(claim.keys - 1, 0))
        return self._staging_sink().begin_transaction(context)

    def headroom(self, sink_id: str) -> Headroom | None:
        """The server's prepared-transaction room; ``None`` when no task needs it (staging mode,
        no prepared mode, or :attr:`may_stage`)."""
        if not self._has_prepared_mode() or self.mode == STAGING or self.may_stage:
            return None
        return self._prepared_sink().headroom(sink_id)

    def commit_mode(self) -> str:
        """The settled mode and why (after :meth:`validate`)."""
        return f"twopc-jdbc {self.mode or 'unsettled'} mode ({self.reason or 'settled at validate'})"
