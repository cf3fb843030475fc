"""PostgreSQL's SQL for the prepared-transaction protocol (the
:class:`~twopc.sinks.sql._sql_dialect.SqlDialect` of :class:`twopc.sinks.postgres.PostgresSink`):
session setup, COPY loading, ``PREPARE TRANSACTION``, ``COMMIT``/``ROLLBACK PREPARED`` and the catalog checks."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import errors as pgerr
from psycopg import sql

from twopc import ConfigurationError, SinkError
from twopc.spi import TargetConfigurationError

from ..sql._names import TableName, parse_table_name
from ..sql._sql_dialect import SqlTxn, TxnControl
from ..sql._sql_target import SqlTarget
from ..sql.options import isolation_sql
from . import _server as server
from ._dialect import PostgresDialect
from ._server import PgColumn, identifier

if TYPE_CHECKING:
    import pyarrow as pa

    from twopc.spi import Headroom

    from ._copy import CopyPlan

# What works on Arrow is imported in the methods that use it: a worker that only commits loads no pyarrow.

__all__ = ["PostgresPrepared"]

log = logging.getLogger("twopc.sinks.postgres")


def _create(pg: psycopg.Connection[Any], statements: Sequence[sql.Composed]) -> type[psycopg.Error] | None:
    """Run the DDL *statements* in one transaction; the error class when the schema is missing or
    the user may not create there."""
    try:
        with pg.transaction():
            for q in statements:
                pg.execute(q)
    except (pgerr.UniqueViolation, pgerr.DuplicateTable, pgerr.DuplicateObject):
        pass  # created concurrently
    except (pgerr.InvalidSchemaName, pgerr.InsufficientPrivilege) as exc:
        return type(exc)
    return None


class PostgresPrepared(PostgresDialect):
    """PostgreSQL's part of a prepared-transaction sink, on *target*'s connections."""

    def __init__(self, target: SqlTarget) -> None:
        self.target = target

    def check_server(self, pg: psycopg.Connection[Any]) -> None:
        row = pg.execute("SHOW max_prepared_transactions").fetchone()
        if row is None or int(row[0]) <= 0:
            raise TargetConfigurationError(
                f"PostgreSQL at {self.target.where()} has max_prepared_transactions = {row[0] if row else '?'}, so it "
                "cannot prepare transactions and twopc cannot write exactly once. Set max_prepared_transactions (e.g. "
                "64, and at least the number of concurrent write tasks) in postgresql.conf and restart PostgreSQL")

    def table_columns(self, pg: psycopg.Connection[Any], *, validating: bool) -> list[PgColumn]:
        t = self.target
        if (oid := server.table_oid(pg, t.table)) is None:
            similar = server.similar_tables(pg, t.table) if validating else []
            raise t.no_such_table(similar, validating=validating, database=t.options.url.database,
                                  case_hint="Quote mixed-case names in dbtable.")
        if validating:
            kind, can_insert = pg.execute(
                "SELECT c.relkind, has_table_privilege(c.oid, 'INSERT') FROM pg_class c WHERE c.oid = %s",
                (oid,)).fetchone() or ("?", False)
            if kind not in ("r", "p"):
                raise TargetConfigurationError(
                    f"{t.table_label} is not a table (relkind {kind!r}): twopc writes to ordinary or "
                    f"partitioned tables only")
            if problem := server.rollback_problem(pg, oid, t.table_label):
                raise TargetConfigurationError(problem)
            if not can_insert:
                raise TargetConfigurationError(
                    f"the user has no INSERT privilege on {t.table_label}: GRANT INSERT ON {t.table_label} TO <user>")
        return server.table_columns(pg, oid)

    def marker_table_ddl(self) -> list[str]:
        """The SQL validation runs to create the marker table (for DBAs)."""
        return [q.as_string(None) for q in self._marker_ddl()]

    def _marker_ddl(self) -> list[sql.Composed]:
        marker = identifier(self.target.marker)
        index = sql.Identifier(self.target.marker.name[:40] + "_sink_batch_idx")
        return [
            sql.SQL("CREATE TABLE IF NOT EXISTS {} (gid text PRIMARY KEY, sink_id text NOT NULL, "
                    "batch_id bigint NOT NULL, partition_id int NOT NULL, rows bigint NOT NULL, "
                    "prepared_at timestamptz NOT NULL DEFAULT now())").format(marker),
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (sink_id, batch_id)").format(index, marker),
        ]

    def marker_columns(self, pg: psycopg.Connection[Any]) -> list[str] | None:
        columns = server.catalog_columns(pg, self.target.marker)
        return None if columns is None else [c.name for c in columns]

    def create_markers(self, pg: psycopg.Connection[Any]) -> None:
        marker_table = self.target.marker_label
        if (refused := _create(pg, self._marker_ddl())) is pgerr.InvalidSchemaName:
            raise TargetConfigurationError(
                f"cannot create the marker table {marker_table}: its schema does not exist. "
                f"Create the schema or set option markerTable to a table in an existing schema")
        if refused is not None:
            raise TargetConfigurationError(
                f"cannot create the marker table {marker_table}: permission denied. Create it once as an owner: "
                f"{'; '.join(self.marker_table_ddl())}; GRANT SELECT, INSERT, DELETE ON {marker_table} TO <user>")

    def ensure_own_tables(self, pg: psycopg.Connection[Any]) -> None:
        """Check the dead-letter table (``deadLetterTable``), or create it."""
        if (table := self._dead_letter()) is None:
            return
        from ._dead_letter import DEAD_LETTER_COLUMNS, dead_letter_ddl, wrong_dead_letter_types
        if (oid := server.table_oid(pg, table)) is None:
            if (refused := _create(pg, [dead_letter_ddl(table)])) is not None:
                raise TargetConfigurationError(
                    f"cannot create the dead-letter table {table.display()} ({refused.__name__}): create it once as an "
                    f"owner: {dead_letter_ddl(table).as_string(None)}; GRANT INSERT ON {table.display()} TO <user>")
            log.info("twopc: created dead-letter table %s", table.display())
            return
        columns = server.table_columns(pg, oid)
        have = {c.name.lower() for c in columns}
        if missing := [c for c in DEAD_LETTER_COLUMNS if c not in have]:
            raise TargetConfigurationError(
                f"{table.display()} exists but is not a twopc dead-letter table (it lacks columns "
                f"{', '.join(missing)}): set option deadLetterTable to another name")
        if (wrong := wrong_dead_letter_types(table, columns)) is not None:
            raise TargetConfigurationError(wrong)

    def _dead_letter(self) -> TableName | None:
        name = self.target.options.dead_letter_table
        return None if name is None else parse_table_name(name, self.target.database.name, "deadLetterTable")

    def begin(self, txn: SqlTxn[PgColumn]) -> None:
        assert txn.conn is not None
        pg: psycopg.Connection[Any] = txn.conn.driver_connection  # type: ignore[assignment]  # psycopg: the engine's driver
        t = self.target
        o = t.options
        pg.execute("BEGIN ISOLATION LEVEL " + isolation_sql(o.isolation_level))
        pg.execute(*server.session_settings(o.lock_timeout, o.query_timeout)[0])
        if o.session_init_statement:
            pg.execute(o.session_init_statement)  # user SQL, run as given
        txn.columns = self.table_columns(pg, validating=False)
        from ._dead_letter import CheckedCopy
        txn.loader = CheckedCopy(pg, t.table, txn.context, dead_letter=self._dead_letter(),
                                 fail=t.map_error, redact=t.redact)

    def load_rows(self, txn: SqlTxn[PgColumn], cols: list[PgColumn], keys: tuple[str, ...],
                  rows: list[dict[str, Any]]) -> None:
        from ..sql._json_values import json_text
        from ..sql._type_rules import Family
        from ._columns import family
        if nul := next(((k, i) for k in keys for i, r in enumerate(rows) if isinstance(r[k], str) and "\x00" in r[k]),
                       None):
            raise ConfigurationError(
                f"column {nul[0]!r}: the value of row {nul[1]} contains a NUL byte (\\x00), which "
                f"PostgreSQL text cannot store; remove it before writing")
        json_cols = {k for k, c in zip(keys, cols, strict=True) if family(c) is Family.JSON}
        txn.loader.write_rows(cols, [[json_text(r[k]) if k in json_cols and isinstance(r[k], dict | list | tuple)
                                      else r[k] for k in keys] for r in rows])

    def plan(self, schema: pa.Schema, cols: list[PgColumn]) -> CopyPlan:
        from ._copy import plan_copy
        return plan_copy(schema, cols, self.target.options.copy_format)

    def load_batch(self, txn: SqlTxn[PgColumn], batch: pa.RecordBatch, plan: CopyPlan) -> None:
        txn.loader.write_batch(batch, plan)

    def end_load(self, txn: SqlTxn[PgColumn]) -> None:
        txn.loader.end()
        txn.rows -= txn.loader.dead  # the marker counts the rows that reached the table

    def prepare(self, txn: SqlTxn[PgColumn], control: TxnControl[PgColumn]) -> None:
        """Marker row, ``PREPARE TRANSACTION``, check ``pg_prepared_xacts``, release the session; a
        prepare that may have reached the server is rolled back on failure."""
        pg: psycopg.Connection[Any] = control.usable(txn)
        marker_sql, marker_values = control.marker_row(txn)
        prepare_sent = False
        try:
            with pg.cursor() as cur:
                cur.execute(marker_sql, marker_values)
                prepare_sent = True
                cur.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(txn.gid)))
                status = cur.statusmessage
                prepared = status == "PREPARE TRANSACTION" and cur.execute(
                    "SELECT 1 FROM pg_prepared_xacts WHERE gid = %s AND database = current_database()",
                    (txn.gid,)).fetchone() is not None
        except BaseException as exc:
            if prepare_sent:
                self._rollback_prepared_quietly(txn.gid)
            if isinstance(exc, psycopg.Error):
                control.fail(txn, exc, f"prepare the transaction on {self.target.table_label}")
            control.abandon(txn, exc)
            raise
        if not prepared:
            control.release(txn, broken=False)
            txn.failed = f"PREPARE TRANSACTION answered {status!r}"
            raise SinkError(
                f"PostgreSQL did not prepare transaction {txn.gid} on {self.target.table_label} (it answered "
                f"{status!r}): the transaction had already been aborted by an earlier error, so "
                f"nothing was written; the task must be retried")
        txn.prepared = True
        control.release(txn, broken=False)  # the session is idle: returning it cannot touch the prepared txn

    def rollback(self, txn: SqlTxn[PgColumn]) -> bool:
        """``ROLLBACK`` (after cancelling a COPY in progress); ``True`` when it failed."""
        if txn.loader is not None:
            txn.loader.cancel()
        try:
            pg: psycopg.Connection[Any] = txn.conn.driver_connection  # type: ignore[union-attr, assignment]  # psycopg: the engine's driver
            if not pg.closed and pg.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                pg.execute("ROLLBACK")
        except Exception:
            log.debug("twopc postgres: rollback of %s failed; discarding the connection", txn.gid, exc_info=True)
            return True
        return False

    def _rollback_prepared_quietly(self, gid: str) -> None:
        try:
            self.target.control_execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
        except Exception:
            log.debug("twopc postgres: could not roll back %s after a failed prepare", gid, exc_info=True)

    def finish(self, verb: str, gid: str) -> bool:
        try:
            self.target.control_execute(sql.SQL(verb + " PREPARED {}").format(sql.Literal(gid)))
        except pgerr.UndefinedObject:
            return False
        except psycopg.Error as exc:
            raise self.target.map_error(exc, f"{verb} PREPARED {gid}") from None
        return True

    def finish_many(self, verb: str, gids: Sequence[str], *, recovering: bool) -> list[bool]:
        """``<verb> PREPARED`` for every id in pipelines; *recovering*: first ask which are still prepared."""
        from . import _commit_pipeline as pipeline  # the driver's commit: a task prepares and stops
        still = None
        if recovering:
            with self.target.mapped("list prepared transactions"):
                _n, rows = self.target.control_execute(
                    "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid = ANY(%s)",
                    (list(gids),), fetch=True)
            still = {str(r[0]) for r in rows}
        done = pipeline.finish_many(self.target, verb, gids, still)
        return [done[g] for g in gids]

    def prepared_elsewhere(self, gid: str) -> str | None:
        _n, rows = self.target.control_execute(
            "SELECT database FROM pg_prepared_xacts WHERE gid = %s AND database <> current_database()", (gid,),
            fetch=True)
        return f"database {rows[0][0]!s}" if rows else None

    def prepared_since(self, prefix: str) -> dict[str, float]:
        _n, rows = self.target.control_execute(
            "SELECT gid, extract(epoch FROM prepared)::float8 FROM pg_prepared_xacts "
            "WHERE database = current_database() AND starts_with(gid, %s)", (prefix,), fetch=True)
        return {str(r[0]): float(r[1]) for r in rows}

    def headroom(self) -> Headroom:
        from twopc.spi import Headroom  # twopc status's: a write's workers never build one
        _n, rows = self.target.control_execute(
            "SELECT (SELECT count(*) FROM pg_prepared_xacts), current_setting('max_prepared_transactions')::int",
            fetch=True)
        return Headroom("max_prepared_transactions", int(rows[0][0]), int(rows[0][1]))

    def prepared_ids(self, prefix: str) -> list[str]:
        return list(self.prepared_since(prefix))
