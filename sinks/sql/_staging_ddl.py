"""The staging mode's plan-time side: checking the target against the DataFrame, and
creating (or re-creating) the staging and batch marker tables before any task runs."""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from twopc.spi import SchemaMismatchError, TargetConfigurationError, redact
from twopc.spi.lease import EPHEMERAL_PREFIX, ephemeral_started, ephemeral_writer_dead

from ._errors import session_init_failed
from ._privileges import Run, require_privileges
from ._staging_statements import batches_table, check_unique, sql_string, stage_table
from ._staging_tables import TXN_COLUMN, StagingTables, fresh
from ._table_columns import VerbatimType, check_columns, same_type
from ._transactional import require_transactional

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy.engine import Connection

    from ._names import TableName

__all__ = ["StagingDdl"]

log = logging.getLogger("twopc.sinks.staging")


class StagingDdl(StagingTables):
    """Validation and DDL of the staging mode, on its tables."""

    def _try_session_init(self) -> None:
        """Run ``sessionInitStatement`` once, rolled back, so a bad one fails at validation."""
        stmt = self.options.session_init_statement
        if not stmt:
            return
        with self.connect() as conn:
            try:
                conn.exec_driver_sql(stmt)
            except SQLAlchemyError as exc:
                orig = getattr(exc, "orig", None) or exc
                detail = redact(" ".join(str(orig).split())[:500], self.options.secrets())
                raise session_init_failed(self.options.safe_url(), detail) from None
            finally:
                conn.rollback()

    def validate(self, schema: pa.Schema) -> None:
        """Check the target against the DataFrame and prepare staging: the staging and batch marker tables, a missing
        target where DDL cannot join the commit; delete staged rows of dead ``eph-`` writes; warn what an overwrite that
        re-creates the target will lose. Raises ``SinkUnavailableError``: no connection; ``TargetConfigurationError``:
        ``errorifexists`` and the table exists; the staging table holds an unfinished write's rows with other columns;
        DDL refused; privileges missing; ``SchemaMismatchError``: the DataFrame does not fit the table, or
        ``upsertKeys`` has no matching unique constraint."""
        from ._recreate_losses import recreate_losses  # here: it loads pyarrow, which a commit never needs
        self.schema = schema
        keys = self.options.upsert_keys
        self._try_session_init()
        with self.session(f"validate {self.table.display()}") as conn:
            exists = self.has_table(conn, self.table)
            if exists:
                require_transactional(conn, self.table)
            if exists and self.mode == "errorifexists":
                raise TargetConfigurationError(
                    f"table {self.table.display()} already exists and the save mode is errorifexists (Spark's "
                    f"default, and twopc.write_jdbc's when no mode is given): nothing was written. Give mode "
                    f"\"append\" to add the rows, \"overwrite\" to replace them, or \"ignore\" to write nothing "
                    f"when the table exists (twopc.write_jdbc(..., mode=\"append\"); on format twopc-jdbc: "
                    f".mode(\"append\"))")
            recreate = self.mode == "overwrite" and self.replaced_by() == "drop"
            ddl = self.create_ddl(conn)  # maps every column type now: errors before any task runs
            if exists and recreate and (lost := recreate_losses(
                    conn, self.table, schema, overrides=self.options.create_table_column_types, keys=keys,
                    comment=self.options.table_comment)):
                log.warning(
                    "twopc staging: overwrite without truncate drops %s and re-creates it from the DataFrame, as "
                    "Spark's JDBC writer does; the table will lose: %s. To keep the table and replace only its "
                    "rows, set .option(\"truncate\", \"true\")", self.table.display(), "; ".join(lost))
            stage_types: dict[str, str] = {}
            if exists and not recreate:
                matched = check_columns(conn, self.table, schema)
                if self.dialect.stages_in_table_types:
                    stage_types = {f.name: c.display_type for f, c in zip(schema, matched, strict=True)}
            if keys:
                missing = [k for k in keys if k.lower() not in {n.lower() for n in schema.names}]
                if missing:
                    raise SchemaMismatchError(f"upsertKeys {missing} are not DataFrame columns ({schema.names})")
                if exists and not recreate:
                    check_unique(conn, self.table, keys)
            if not exists and not self.dialect.transactional_ddl and self.mode != "ignore":
                self._create_table_now(conn, ddl)
            if (name := self.options.twopc_schema) is not None:
                self.dialect.ensure_schema(self._each_alone(conn, keep=True), name, self.options.url.database or "")
            self._ensure_stage(conn, schema, stage_types)
            require_transactional(conn, self.stage, role="the staging table")
            if not self.has_table(conn, self.batches):
                self._create(conn, self.batches, batches_table(self.batches))
            require_transactional(conn, self.batches, role="the batch marker table")
            # tasks insert staged rows; the commit reads and deletes them, and keeps a batch marker
            for t, cols, role in ((self.stage, (TXN_COLUMN,), "the staging table"),
                                  (self.batches, ("sink_id", "batch_id", "rows", "committed_at"),
                                   "the batch marker table")):
                require_privileges(self._each_alone(conn, keep=False), self.dialect_name,
                                   table=t.quoted(conn.dialect), display=t.display(), columns=[self.q(c) for c in cols],
                                   privileges=("SELECT", "INSERT", "DELETE"), role=role)
            self._expire_ephemeral(conn)

    def expire_abandoned(self) -> None:
        """Delete staged rows of dead ``eph-`` writes without preparing staging (a prepared-mode write cleans up
        after a dead staging write). Raises ``SinkUnavailableError``/``SinkError``: the server failed."""
        with self.session(f"clean up staged rows in {self.stage.display()}") as conn:
            if self.has_table(conn, self.stage):
                self._expire_ephemeral(conn)

    def _create_table_now(self, conn: Connection, ddl: str) -> None:
        """Create the missing target at validation, dropped again when it cannot roll back
        (a non-transactional engine): nothing is left."""
        with fresh(conn):
            conn.exec_driver_sql(ddl)
        try:
            require_transactional(conn, self.table)
        except TargetConfigurationError:
            with fresh(conn):
                conn.exec_driver_sql(f"DROP TABLE {self.table.quoted(conn.dialect)}")
            raise
        log.info("twopc staging: created %s (MySQL DDL cannot join the commit transaction)", self.table.display())

    def create_ddl(self, conn: Connection) -> str:
        """``CREATE TABLE`` of the target for the DataFrame (table options, key on ``upsertKeys``, comment)."""
        from ._arrow_ddl import create_table_sql  # here, as below: a commit never loads pyarrow
        assert self.schema is not None
        o = self.options
        ddl = create_table_sql(self.table, self.schema, conn.dialect, overrides=o.create_table_column_types)
        if o.upsert_keys:
            names = {n.lower(): n for n in self.schema.names}
            keys = ", ".join(self.q(names.get(k.lower(), k)) for k in o.upsert_keys)
            ddl = ddl[:ddl.rindex(")")] + f", PRIMARY KEY ({keys}))"
        if o.create_table_options.strip():
            ddl += " " + o.create_table_options.strip()
        if o.table_comment and self.dialect.table_comments == "create":
            ddl += " COMMENT = " + sql_string(o.table_comment, backslash=True)
        return ddl

    @staticmethod
    def _each_alone(conn: Connection, *, keep: bool) -> Run:
        """A :data:`~twopc.sinks.sql._privileges.Run` on *conn*: each statement in its own
        transaction, committed when *keep*, else rolled back."""
        def run(query: str) -> list[tuple[Any, ...]]:
            if conn.in_transaction():
                conn.commit()
            try:
                r = conn.exec_driver_sql(query)
                rows = [tuple(row) for row in r.fetchall()] if r.returns_rows else []
            except BaseException:
                conn.rollback()
                raise
            (conn.commit if keep else conn.rollback)()
            return rows
        return run

    def _ensure_stage(self, conn: Connection, schema: pa.Schema, types: dict[str, str]) -> None:
        """Create the staging table, or re-create it (when empty) if its columns are not the
        DataFrame's; of the target's *types* where given (rows then convert as in the prepared modes)."""
        from ._arrow_ddl import arrow_to_sqlalchemy
        want = [TXN_COLUMN, *schema.names]
        if self.has_table(conn, self.stage):
            have = [c["name"] for c in sa.inspect(conn).get_columns(self.stage.name, schema=self.stage.schema)]
            # a staged column of another type would convert the values before the target sees them
            staged = self.dialect.catalog_columns(conn.connection.driver_connection, self.stage) or []
            have_types = {c.name: c.display_type for c in staged}
            want_types = {f.name: types.get(f.name)
                          or arrow_to_sqlalchemy(f, conn.dialect.name).compile(dialect=conn.dialect)
                          for f in schema} if have_types else {}
            if have == want and all(same_type(have_types.get(n, ""), t, self.dialect_name)
                                    for n, t in want_types.items()):
                return
            with fresh(conn):
                n = conn.execute(sa.text(f"SELECT count(*) FROM {self.stage.quoted(conn.dialect)}")).scalar_one()
                if n:
                    raise TargetConfigurationError(
                        f"staging table {self.stage.display()} holds {n} rows of an unfinished write whose "
                        f"columns (or their types) differ from this DataFrame's; finish it first (python -m "
                        f"recovery with that query's checkpoint) or delete them")
                conn.exec_driver_sql(f"DROP TABLE {self.stage.quoted(conn.dialect)}")
        self._create(conn, self.stage, stage_table(self.stage, schema, self.dialect_name,
                                                   {n: VerbatimType(t) for n, t in types.items()}))

    def _create(self, conn: Connection, t: TableName, table: sa.Table) -> None:
        try:
            with fresh(conn):
                table.create(conn, checkfirst=True)
        except SQLAlchemyError:
            if not self.has_table(conn, t):
                raise

    def delete_staged_rows(self, conn: Connection, ids: Sequence[str]) -> None:
        if not ids:
            return
        conn.execute(sa.text(f"DELETE FROM {self.stage.quoted(conn.dialect)} WHERE {self.q(TXN_COLUMN)} IN :ids")
                     .bindparams(sa.bindparam("ids", expanding=True)), {"ids": list(ids)})

    def _expire_ephemeral(self, conn: Connection) -> None:
        """Delete staged rows of ``eph-`` writes whose driver provably died here, or started more
        than ``stagingRetention`` ago (if alive, its commit finds rows missing and writes nothing)."""
        now = dt.datetime.now(dt.UTC).timestamp()
        stale = []
        dead = functools.cache(ephemeral_writer_dead)  # asked once per write
        for txn_id in self.staged_counts(conn, f"twopc:{EPHEMERAL_PREFIX}"):
            sink_id = txn_id.split(":")[1]
            started = ephemeral_started(sink_id)
            if started is not None and (dead(sink_id) or now - started > self.options.staging_retention.seconds):
                stale.append(txn_id)
        if stale:
            with fresh(conn):
                self.delete_staged_rows(conn, stale)
            writes = sorted({t.split(":")[1] for t in stale})
            log.info("twopc staging: deleted from %s the staged rows of %s abandoned drop-in write(s) (their driver "
                     "is gone, or they started more than stagingRetention ago): %s", self.stage.display(),
                     len(writes), ", ".join(writes))
