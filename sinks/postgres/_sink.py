"""PostgreSQL two-phase-commit sink.

Each Spark task attempt opens one PostgreSQL transaction, bulk-loads its rows with
``COPY ... FROM STDIN`` (binary when every column allows it, else CSV; see
:mod:`twopc.sinks.postgres._copy`), writes a marker row, and ``PREPARE TRANSACTION``\\ s it under
a GID that names the sink, batch, partition and attempt (a :class:`twopc.Xid`)::

    twopc:{sink_id}:{batch_id}:{partition_id}:{attempt_id}:{8 random hex}

The driver then runs ``COMMIT PREPARED`` (or ``ROLLBACK PREPARED``) from any session.
Because a repeated ``COMMIT PREPARED`` answers "does not exist" exactly like a rolled-back
GID does, the marker row (committed atomically with the data) tells "already committed"
from "lost". The protocol itself lives in :class:`~twopc.sinks.sql.PreparedSqlSink`; this module
is PostgreSQL's part of it.

Requirements on the server: ``max_prepared_transactions`` > 0 (at least the partitions of a
batch plus retried attempts: each task claims a slot before its first row, and fails with
nothing written when none is free, :mod:`twopc.sinks.postgres._slots`), ``INSERT`` on the target
table, and ``CREATE`` on the marker
table's schema the first time (or create the marker table yourself; see
:meth:`PostgresSink.marker_table_ddl`).

Options (``df.write.format("twopc-postgres").option(...)``): the options of ``twopc-jdbc``
with the same meanings (see :mod:`twopc.sinks.sql.options._jdbc_options`), for PostgreSQL URLs, appending to
an existing table. The ones that matter most: ``url`` (``jdbc:postgresql://...``,
``postgresql://...``), ``dbtable``, ``user``, ``password``, ``markerTable`` (default
``twopc_markers``), ``lockTimeout`` (default ``30s``), ``connectTimeout`` (default ``10s``),
``copyFormat`` (``auto``, ``binary``, ``csv``), ``isolationLevel``, ``queryTimeout``,
``sessionInitStatement``.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import errors as pgerr
from psycopg import sql

from twopc import ConfigurationError, SinkError, TransactionContext, TransactionLostError
from twopc.spi import Headroom, TargetConfigurationError

from .._handles import PostgresHandle
from ..sql._names import TableName, parse_table_name
from ..sql.connect._sql_dialect import SqlTxn
from ..sql.prepared._sink import PreparedSqlSink
from ..sql.types._json_values import json_text
from ..sql.types._type_rules import Family
from . import _server as server
from ._columns import PgColumn, family
from ._copy import CopyPlan, identifier, plan_copy
from ._dead_letter import DEAD_LETTER_COLUMNS, CheckedCopy, dead_letter_ddl, wrong_dead_letter_types
from ._deadline import deadline_pipeline
from ._errors import no_free_slot
from ._slots import Claim, claim_slot, wait_for_driver_slot
from ._spec import POSTGRES

__all__ = ["PostgresHandle", "PostgresSink"]

log = logging.getLogger("twopc.sinks.postgres")

#: ids per ``COMMIT PREPARED`` pipeline before a batch is spread over several connections
PER_PIPELINE = 25
#: at most this many pipelines (connections) commit one batch at once
MAX_PIPELINES = 8



class PostgresSink(PreparedSqlSink[PgColumn, PostgresHandle]):
    """Exactly-once appends to one PostgreSQL table through ``PREPARE TRANSACTION``.

    Args:
        url: a ``jdbc:postgresql://`` URL or a SQLAlchemy URL (``postgresql://``,
            ``postgresql+psycopg://``; other PostgreSQL drivers are replaced by psycopg 3).
        table: ``[schema.]table`` in PostgreSQL syntax (quote mixed-case names).
        **options: ``user``, ``password``, ``marker_table``, ``lock_timeout`` (PostgreSQL
            ``lock_timeout`` of write transactions: ``"30s"``, ``"500ms"``, ``0`` waits
            forever; a task that meets rows locked by a prepared transaction of an earlier
            attempt fails after this time), ``connect_timeout``, ``copy_format``
            (``"auto"``, ``"binary"``, ``"csv"``), ``isolation_level`` (Spark's names),
            ``query_timeout`` (``statement_timeout`` of write transactions),
            ``session_init_statement`` (SQL run at the start of every write transaction).

    Raises:
        ConfigurationError: an argument is invalid.
    """

    handle_type = PostgresHandle
    spec = POSTGRES

    # -- validation (driver) -------------------------------------------------------------
    def _check_server(self, pg: psycopg.Connection[Any]) -> None:
        row = pg.execute("SHOW max_prepared_transactions").fetchone()
        if row is None or int(row[0]) <= 0:
            raise TargetConfigurationError(
                f"PostgreSQL at {self._where()} has max_prepared_transactions = "
                f"{row[0] if row else '?'}, so it cannot prepare transactions and twopc cannot "
                f"write exactly once. Set max_prepared_transactions (e.g. 64, and at least the "
                f"number of concurrent write tasks) in postgresql.conf and restart PostgreSQL")

    def _target_columns(self, pg: psycopg.Connection[Any], *, validating: bool) -> list[PgColumn]:
        oid = server.table_oid(pg, self._target)
        if oid is None:
            similar = server.similar_tables(pg, self._target) if validating else []
            raise self._no_such_table(similar, validating=validating, database=self.options.url.database,
                                      case_hint="Quote mixed-case names in dbtable.")
        if validating:
            kind, can_insert = pg.execute(
                "SELECT c.relkind, has_table_privilege(c.oid, 'INSERT') FROM pg_class c WHERE c.oid = %s",
                (oid,)).fetchone() or ("?", False)
            if kind not in ("r", "p"):
                raise TargetConfigurationError(
                    f"{self.table} is not a table (relkind {kind!r}): twopc writes to ordinary or "
                    f"partitioned tables only")
            if problem := server.rollback_problem(pg, oid, self.table):
                raise TargetConfigurationError(problem)
            if not can_insert:
                raise TargetConfigurationError(
                    f"the user has no INSERT privilege on {self.table}: GRANT INSERT ON {self.table} TO <user>")
        return server.table_columns(pg, oid)

    def marker_table_ddl(self) -> list[str]:
        """The SQL :meth:`validate` runs to create the marker table (for DBAs)."""
        return [q.as_string(None) for q in self._marker_ddl()]

    def _marker_ddl(self) -> list[sql.Composed]:
        marker = identifier(self._marker)
        index = sql.Identifier(self._marker.name[:40] + "_sink_batch_idx")
        return [
            sql.SQL("CREATE TABLE IF NOT EXISTS {} (gid text PRIMARY KEY, sink_id text NOT NULL, "
                    "batch_id bigint NOT NULL, partition_id int NOT NULL, rows bigint NOT NULL, "
                    "prepared_at timestamptz NOT NULL DEFAULT now())").format(marker),
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (sink_id, batch_id)").format(index, marker),
        ]

    def _marker_columns(self, pg: psycopg.Connection[Any]) -> list[str] | None:
        oid = server.table_oid(pg, self._marker)
        return None if oid is None else [c.name for c in server.table_columns(pg, oid)]

    def _create_markers(self, pg: psycopg.Connection[Any]) -> None:
        try:
            with pg.transaction():
                for q in self._marker_ddl():
                    pg.execute(q)
        except (pgerr.UniqueViolation, pgerr.DuplicateTable, pgerr.DuplicateObject):
            pass  # created concurrently
        except pgerr.InvalidSchemaName:
            raise TargetConfigurationError(
                f"cannot create the marker table {self.marker_table}: its schema does not exist. "
                f"Create the schema or set option markerTable to a table in an existing schema") from None
        except pgerr.InsufficientPrivilege:
            raise TargetConfigurationError(
                f"cannot create the marker table {self.marker_table}: permission denied. Create it "
                f"once as an owner: {'; '.join(self.marker_table_ddl())}; GRANT SELECT, INSERT, DELETE ON "
                f"{self.marker_table} TO <user>") from None

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
            raise no_free_slot(self._where(), self.table, context.partition_id, claim.limit, claim.keys)
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
        txn = super().begin_transaction(context)
        self._claim(txn, wait_for_driver_slot)
        return txn

    def _claim(self, txn: SqlTxn[PgColumn], claim: Callable[[psycopg.Connection[Any]], Claim]) -> Claim:
        try:
            return claim(self._usable(txn))
        except psycopg.Error as exc:
            self._fail(txn, exc, "claim a prepared-transaction slot")
            raise  # not reached: _fail raises
        except BaseException as exc:
            self._abandon(txn, exc)
            raise

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
        pg: psycopg.Connection[Any] = self._usable(txn)
        cols = self._match(list(names), None, txn.columns, check_types=False, check_required=False)
        stmt = sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} WHERE twopc_txn = ANY(%s)").format(
            identifier(self._target), sql.SQL(", ").join(sql.Identifier(c.name) for c in cols),
            sql.SQL(", ").join(sql.Identifier(n) for n in names), identifier(stage))
        try:
            copied = pg.execute(stmt, (list(txn_ids),)).rowcount
        except psycopg.Error as exc:
            self._fail(txn, exc, f"move staged rows from {stage.display()} into {self.table}")
            raise  # not reached: _fail raises
        except BaseException as exc:
            self._abandon(txn, exc)
            raise
        if copied != rows:
            self._abandon(txn, TransactionLostError("staged rows missing"))
            raise TransactionLostError(
                f"{stage.display()} holds {copied} staged rows of the attempts {list(txn_ids)[:5]}"
                f"{'...' if len(txn_ids) > 5 else ''}, not the {rows} their tasks reported (were they deleted?): "
                f"nothing was written to {self.table}; the batch fails")
        txn.rows += copied

    def _begin(self, txn: SqlTxn[PgColumn]) -> None:
        pg: psycopg.Connection[Any] = self._usable(txn)
        o = self.options
        pg.execute("BEGIN ISOLATION LEVEL " + o.isolation_sql)
        pg.execute(*server.session_settings(o.lock_timeout, o.query_timeout))
        if o.session_init_statement:
            pg.execute(o.session_init_statement)  # user SQL, run as given
        txn.columns = self._target_columns(pg, validating=False)
        txn.loader = CheckedCopy(pg, self._target, txn.context, dead_letter=self._dead_letter(),
                                 fail=self._map_error, redact=self._redact)

    def _load_rows(self, txn: SqlTxn[PgColumn], cols: list[PgColumn], keys: tuple[str, ...],
                   rows: list[dict[str, Any]]) -> None:
        for k in keys:
            for i, r in enumerate(rows):
                v = r[k]
                if isinstance(v, str) and "\x00" in v:
                    raise ConfigurationError(
                        f"column {k!r}: the value of row {i} contains a NUL byte (\\x00), which "
                        f"PostgreSQL text cannot store; remove it before writing")
        json_cols = {k for k, c in zip(keys, cols, strict=True) if family(c) is Family.JSON}
        txn.loader.write_rows(cols, [[json_text(r[k]) if k in json_cols and isinstance(r[k], dict | list | tuple)
                                      else r[k] for k in keys] for r in rows])

    def _plan(self, schema: pa.Schema, cols: list[PgColumn]) -> CopyPlan:
        return plan_copy(schema, cols, self.options.copy_format)

    def _load_batch(self, txn: SqlTxn[PgColumn], batch: pa.RecordBatch, plan: CopyPlan) -> None:
        txn.loader.write_batch(batch, plan)

    def _end_load(self, txn: SqlTxn[PgColumn]) -> None:
        txn.loader.end()
        txn.rows -= txn.loader.dead  # the marker counts the rows that reached the table

    def _dead_letter(self) -> TableName | None:
        name = self.options.dead_letter_table
        return None if name is None else parse_table_name(name, self.spec.name, "deadLetterTable")

    def _ensure_markers(self, dbapi: Any) -> None:
        super()._ensure_markers(dbapi)
        table = self._dead_letter()
        if table is None:
            return
        pg: psycopg.Connection[Any] = dbapi
        oid = server.table_oid(pg, table)
        if oid is None:
            try:
                with pg.transaction():
                    pg.execute(dead_letter_ddl(table))
            except (pgerr.UniqueViolation, pgerr.DuplicateTable, pgerr.DuplicateObject):
                pass  # created concurrently
            except (pgerr.InvalidSchemaName, pgerr.InsufficientPrivilege) as exc:
                raise TargetConfigurationError(
                    f"cannot create the dead-letter table {table.display()} ({type(exc).__name__}): create it "
                    f"once as an owner: {dead_letter_ddl(table).as_string(None)}; GRANT INSERT ON "
                    f"{table.display()} TO <user>") from None
            log.info("twopc: created dead-letter table %s", table.display())
            return
        columns = server.table_columns(pg, oid)
        have = {c.name.lower() for c in columns}
        missing = [c for c in DEAD_LETTER_COLUMNS if c not in have]
        if missing:
            raise TargetConfigurationError(
                f"{table.display()} exists but is not a twopc dead-letter table (it lacks columns "
                f"{', '.join(missing)}): set option deadLetterTable to another name")
        wrong = wrong_dead_letter_types(table, columns)
        if wrong is not None:
            raise TargetConfigurationError(wrong)

    def _prepare(self, txn: SqlTxn[PgColumn]) -> None:
        pg: psycopg.Connection[Any] = self._usable(txn)
        prepare_sent = False
        try:
            with pg.cursor() as cur:
                cur.execute(self._marker_insert(), self._marker_values(txn))
                prepare_sent = True
                cur.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(txn.gid)))
                status = cur.statusmessage
                prepared = status == "PREPARE TRANSACTION" and cur.execute(
                    "SELECT 1 FROM pg_prepared_xacts WHERE gid = %s AND database = current_database()",
                    (txn.gid,)).fetchone() is not None
        except psycopg.Error as exc:
            if prepare_sent:
                self._rollback_prepared_quietly(txn.gid)
            self._fail(txn, exc, f"prepare the transaction on {self.table}")
        except BaseException as exc:
            if prepare_sent:
                self._rollback_prepared_quietly(txn.gid)
            self._abandon(txn, exc)
            raise
        if not prepared:
            self._release(txn, broken=False)
            txn.failed = f"PREPARE TRANSACTION answered {status!r}"
            raise SinkError(
                f"PostgreSQL did not prepare transaction {txn.gid} on {self.table} (it answered "
                f"{status!r}): the transaction had already been aborted by an earlier error, so "
                f"nothing was written; the task must be retried")
        txn.prepared = True
        self._release(txn, broken=False)  # the session is idle: returning it cannot touch the prepared txn

    def rollback(self, txn: SqlTxn[PgColumn]) -> None:
        """Roll back an open, unprepared transaction. Idempotent; never raises."""
        if txn.prepared or txn.conn is None:
            return
        broken = False
        if txn.loader is not None:
            txn.loader.cancel()
        try:
            pg: psycopg.Connection[Any] = txn.conn.driver_connection  # type: ignore[assignment]  # psycopg: the engine's driver
            if not pg.closed and pg.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                pg.execute("ROLLBACK")
        except Exception:
            broken = True
            log.debug("twopc postgres: rollback of %s failed; discarding the connection", txn.gid, exc_info=True)
        txn.failed = txn.failed or "rolled back"
        self._release(txn, broken=broken)

    def _release(self, txn: SqlTxn[PgColumn], *, broken: bool) -> None:
        if txn.loader is not None and txn.loader.is_open:  # only after a broken connection
            txn.loader.drop()
            broken = True
        super()._release(txn, broken=broken)

    def _rollback_prepared_quietly(self, gid: str) -> None:
        try:
            self._control_execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
        except Exception:
            log.debug("twopc postgres: could not roll back %s after a failed prepare", gid, exc_info=True)

    # -- driver side -----------------------------------------------------------------------
    def _finish(self, verb: str, gid: str) -> bool:
        try:
            self._control_execute(sql.SQL(verb + " PREPARED {}").format(sql.Literal(gid)))
        except pgerr.UndefinedObject:
            return False
        except psycopg.Error as exc:
            raise self._map_error(exc, f"{verb} PREPARED {gid}") from None
        return True

    def _finish_many(self, verb: str, gids: Sequence[str], *, recovering: bool) -> list[bool]:
        """``<verb> PREPARED`` for every id, in pipelines: one round trip per pipeline. Up to
        :data:`PER_PIPELINE` ids share the control connection's one pipeline; a larger
        batch is spread over up to :data:`MAX_PIPELINES` pipelines on pooled connections
        that run at once, because PostgreSQL flushes its WAL to disk once per ``COMMIT
        PREPARED`` and only flushes that overlap are merged (group commit). In each
        pipeline the server commits every id at once (the statement cannot run in a
        transaction block, so its implicit transaction ends after it); the first id it does
        not know aborts the rest of that pipeline, which is sent again after it.
        *recovering*: ask first which ids are still prepared (one query), so a batch that
        is mostly finished stays flat too.

        Raises:
            SinkUnavailableError / SinkError: the server failed (other ids may be finished;
                a retry answers them from the marker).
        """
        done: dict[str, bool] = {}
        pending = list(gids)
        if recovering:
            still = self._still_prepared(gids)
            done.update((g, False) for g in gids if g not in still)
            pending = [g for g in gids if g in still]
        count = min(MAX_PIPELINES, -(-len(pending) // PER_PIPELINE))
        if count <= 1:
            done.update(self._finish_in_pipeline(verb, pending, self._control_run))
            return [done[g] for g in gids]
        chunks = [pending[i::count] for i in range(count)]
        runners = [self._control_run] + [self._run_pooled] * (count - 1)
        pool = _commit_threads()
        futures = [pool.submit(self._finish_in_pipeline, verb, c, r) for c, r in zip(chunks, runners, strict=True)]
        concurrent.futures.wait(futures)
        errors = []
        for f in futures:
            try:
                done.update(f.result())
            except Exception as exc:  # noqa: BLE001 - every pipeline ran; the first failure is raised below
                errors.append(exc)
        if errors:
            raise errors[0]
        return [done[g] for g in gids]

    def _finish_in_pipeline(self, verb: str, gids: Sequence[str],
                            run: Callable[[Callable[[Any], int]], int]) -> dict[str, bool]:
        """``<verb> PREPARED`` of *gids* in one pipeline on the connection *run* lends
        (again after each id the server does not know); ``{gid: done}``."""
        done: dict[str, bool] = {}
        pending = list(gids)
        while pending:
            try:
                n = run(functools.partial(_pipelined, verb, pending, self.options.net_timeouts().reply))
            except psycopg.Error as exc:
                raise self._map_error(exc, f"{verb} PREPARED of {len(pending)} transaction(s)") from None
            done.update((g, True) for g in pending[:n])
            if n < len(pending):
                done[pending[n]] = False
            pending = pending[n + 1:]
        return done

    def _still_prepared(self, gids: Sequence[str]) -> set[str]:
        try:
            _n, rows = self._control_execute(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid = ANY(%s)",
                (list(gids),), fetch=True)
        except psycopg.Error as exc:
            raise self._map_error(exc, "list prepared transactions") from None
        return {str(r[0]) for r in rows}
    def _prepared_elsewhere(self, gid: str) -> str | None:
        _n, rows = self._control_execute(
            "SELECT database FROM pg_prepared_xacts WHERE gid = %s AND database <> current_database()", (gid,),
            fetch=True)
        return f"database {rows[0][0]!s}" if rows else None

    def _prepared_since(self, prefix: str) -> dict[str, float]:
        _n, rows = self._control_execute(
            "SELECT gid, extract(epoch FROM prepared)::float8 FROM pg_prepared_xacts "
            "WHERE database = current_database() AND starts_with(gid, %s)", (prefix,), fetch=True)
        return {str(r[0]): float(r[1]) for r in rows}

    def _headroom(self) -> Headroom:
        _n, rows = self._control_execute(
            "SELECT (SELECT count(*) FROM pg_prepared_xacts), current_setting('max_prepared_transactions')::int",
            fetch=True)
        return Headroom("max_prepared_transactions", int(rows[0][0]), int(rows[0][1]))

    def _prepared_ids(self, prefix: str) -> list[str]:
        _n, rows = self._control_execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND starts_with(gid, %s)",
            (prefix,), fetch=True)
        return [str(r[0]) for r in rows]


_THREADS: concurrent.futures.ThreadPoolExecutor | None = None
_THREADS_LOCK = threading.Lock()


def _commit_threads() -> concurrent.futures.ThreadPoolExecutor:
    """This process's threads for a batch's pipelines, started once (starting them for every
    batch cost more than the commits at 200 partitions); a forked child starts its own."""
    global _THREADS
    with _THREADS_LOCK:
        if _THREADS is None:
            _THREADS = concurrent.futures.ThreadPoolExecutor(MAX_PIPELINES, thread_name_prefix="twopc-commit")
        return _THREADS


def _forget_threads_in_child() -> None:
    global _THREADS, _THREADS_LOCK
    _THREADS, _THREADS_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_threads_in_child)


def _pipelined(verb: str, gids: Sequence[str], reply_seconds: float, pg: psycopg.Connection[Any]) -> int:
    """Send ``<verb> PREPARED`` for each of *gids* in one pipeline (autocommit), waiting at
    most *reply_seconds* for the replies; return how many the server finished before the
    first id it does not know (``len(gids)``: all).

    Raises:
        psycopg.Error: any other error, or no reply in time (the ids before it are finished).
    """
    cursors: list[psycopg.Cursor[Any]] = []
    expected = verb + " PREPARED"
    unknown = False
    try:
        with deadline_pipeline(pg, reply_seconds):
            for gid in gids:
                cur = pg.cursor()
                cursors.append(cur)
                cur.execute(sql.SQL(expected + " {}").format(sql.Literal(gid)))
    except pgerr.UndefinedObject:
        unknown = True
    n = 0
    while n < len(cursors) and cursors[n].statusmessage == expected:
        n += 1
    if not unknown and n != len(gids):
        raise SinkError(f"PostgreSQL answered {cursors[n].statusmessage!r} to {expected} {gids[n]}")
    return n
