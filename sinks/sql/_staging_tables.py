"""What the staging sink's parts share: the target, staging and batch marker tables, the save
mode, connections with a write's session settings, and the driver's bookkeeping (staged
attempts, batch markers), which a prepared-mode write that may stage uses alone."""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, SQLAlchemyError

from twopc import ConfigurationError, SinkError, Xid
from twopc.spi import SinkUnavailableError, redact

from .._handles import StagingHandle
from ._engines import engine_for
from ._names import TableName, parse_table_name
from ._registry import SqlDatabase, dialect_for
from .options import JdbcOptions, SaveMode, isolation_sql

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy.engine import Connection, Engine

    from twopc.spi import PreparedDetail

__all__ = ["BATCH_TABLE", "MODES", "TXN_COLUMN", "StagingTables", "default_stage_name", "fresh"]

log = logging.getLogger("twopc.sinks.staging")

MODES = ("append", "overwrite", "errorifexists", "ignore")  #: Spark's save modes the staging sink serves
BATCH_TABLE = "twopc_batches"  #: the default table of committed batch markers
TXN_COLUMN = "twopc_txn"  #: the staging table's column holding each row's transaction id


def default_stage_name(table: TableName) -> str:
    """``twopc_stage_<12 hex of *table*'s name>``."""
    digest = hashlib.sha256(f"{table.schema}.{table.name}".encode()).hexdigest()[:12]
    return f"twopc_stage_{digest}"


def fresh(conn: Connection) -> Any:
    """``conn.begin()`` after ending a transaction that reflection queries auto-began."""
    if conn.in_transaction():
        conn.commit()
    return conn.begin()


class StagingTables:
    """The tables, save mode and connections of one staging sink (picklable: configuration only). Raises
    ``ConfigurationError``: the save mode or an option is invalid."""

    def __init__(self, o: JdbcOptions, *, mode: str, batch_table: str) -> None:
        backend = o.url.get_backend_name()
        self.dialect = dialect_for(backend)
        self.dialect_name = backend if self.dialect is SqlDatabase else self.dialect.name
        if mode not in MODES:
            raise ConfigurationError(f"save mode must be one of {', '.join(MODES)}, got {mode!r}")
        if o.table_comment and self.dialect.table_comments is None:
            raise ConfigurationError(f"tableComment is not supported on {self.dialect_name}: remove the option")
        self.options = o
        self.mode: SaveMode = mode  # type: ignore[assignment]  # checked against MODES above
        self.table = parse_table_name(o.table, self.dialect_name)
        if o.staging_table:
            self.stage = o.bookkeeping(parse_table_name(o.staging_table, self.dialect_name, "stagingTable"))
        elif o.twopc_schema is not None:
            self.stage = o.bookkeeping(TableName(None, default_stage_name(self.table), self.dialect_name))
        else:
            self.stage = self.table.sibling(default_stage_name(self.table))
        self.batches = o.bookkeeping(parse_table_name(batch_table, self.dialect_name, "batch marker table"))
        if self.batches.schema is None and self.table.schema is not None and not self.dialect.file_based:
            self.batches = self.table.sibling(self.batches.name)
        self.schema: pa.Schema | None = None
        self.streaming = False
        if o.upsert_keys and mode == "overwrite":
            log.info("twopc staging: upsertKeys with overwrite: the table is emptied first, keys only dedupe")

    def redact(self, text: str) -> str:
        return redact(text, self.options.secrets())

    def _engine(self) -> Engine:
        return engine_for(self.options.url, self.options.net_timeouts(), autocommit=False)

    def connect(self) -> Connection:
        try:
            conn = self._engine().connect()
        except (DBAPIError, OSError) as exc:
            raise self.unavailable(exc) from None
        if not self.dialect.file_based:
            conn = conn.execution_options(isolation_level=isolation_sql(self.options.isolation_level))
        return conn

    @contextlib.contextmanager
    def session(self, action: str) -> Iterator[Connection]:
        """A connection for the block, rolled back on failure (a database error as :meth:`error`'s)."""
        conn = self.connect()
        try:
            yield conn
        except BaseException as exc:
            with contextlib.suppress(Exception):  # closing the connection rolls back too
                conn.rollback()
            if isinstance(exc, SQLAlchemyError):
                raise self.error(exc, action) from None
            raise
        finally:
            conn.close()

    def unavailable(self, exc: BaseException) -> SinkUnavailableError:
        orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        reason = self.redact(" ".join(str(orig).split()) or type(orig).__name__)
        u = self.options.url
        where = u.database if self.dialect.file_based else f"{u.host}:{u.port or ''}/{u.database or ''}"
        hint = self.dialect.connect_failure(orig)[1]  # the prepared sinks' words for the same failure
        return SinkUnavailableError(f"cannot connect to {self.dialect_name} at {where}: {reason}{hint}")

    def begin(self, conn: Connection) -> None:
        """Start a transaction with a write's session settings (the prepared modes')."""
        fresh(conn)
        o = self.options
        for stmt, params in self.dialect.session_statements(o.lock_timeout, o.query_timeout):
            conn.exec_driver_sql(stmt, params)
        if o.session_init_statement:
            conn.exec_driver_sql(o.session_init_statement)

    def q(self, name: str) -> str:
        return self._engine().dialect.identifier_preparer.quote_identifier(name)

    def error(self, exc: BaseException, action: str) -> SinkError:
        """A credential-free error naming the violated constraint when there is one."""
        if isinstance(exc, OperationalError) and getattr(exc, "connection_invalidated", False):
            return self.unavailable(exc)
        orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        text = self.redact(" ".join(str(orig).split()))[:600]
        if isinstance(exc, IntegrityError):
            diag = getattr(orig, "diag", None)
            what = [f"{kind} {name!r}" for kind in ("column", "constraint")
                    if (name := getattr(diag, f"{kind}_name", None))]
            named = f" ({', '.join(what)})" if what else ""
            return SinkError(f"could not {action}: a constraint of {self.table.display()} was violated{named}: "
                             f"{text}. The whole batch was rolled back: nothing was written")
        # the prepared sinks' words for a value that does not fit its column
        if bad := self.dialect.value_error(orig, action, self.table.display(), self.redact):
            return bad
        return SinkError(f"could not {action}: {text}; the transaction was rolled back")

    def replaced_by(self) -> Literal["drop", "truncate", "delete"]:
        """How an overwrite empties an existing target inside the commit transaction: ``drop``
        (then ``CREATE``, Spark's overwrite, where DDL is transactional), ``truncate`` (with
        ``truncate=true`` where it is transactional), else ``delete``: also for streaming
        ``outputMode("complete")``, which keeps the table's keys, indexes, grants and comment and
        lets readers see the old rows until the commit."""
        if not self.dialect.transactional_ddl:
            return "delete"
        if self.options.truncate:
            return "truncate" if self.dialect.truncates_in_transaction else "delete"
        return "delete" if self.streaming else "drop"

    def commit_write(self) -> str:
        """What the commit does to the target (recorded in each handle): the save mode, or :meth:`replaced_by`."""
        return self.replaced_by() if self.mode == "overwrite" else self.mode

    @staticmethod
    def has_table(conn: Connection, t: TableName) -> bool:
        return sa.inspect(conn).has_table(t.name, schema=t.schema)

    def staged_counts(self, conn: Connection, prefix: str) -> dict[str, int]:
        """Staged rows per transaction id starting with *prefix* (rechecked: ``_`` is a LIKE wildcard)."""
        if not self.has_table(conn, self.stage):
            return {}
        col = self.q(TXN_COLUMN)
        rows = conn.execute(sa.text(f"SELECT {col}, COUNT(*) FROM {self.stage.quoted(conn.dialect)} "
                                    f"WHERE {col} LIKE :p GROUP BY {col}"), {"p": prefix + "%"}).all()
        return {str(r[0]): int(r[1]) for r in rows if str(r[0]).startswith(prefix)}

    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> list[StagingHandle]:
        """Attempts of *sink_id* (and *batch_id*) with rows in the staging table."""
        return [h for h, _rows in self._staged(sink_id) if batch_id is None or h.batch_id == batch_id]

    def prepared_details(self, sink_id: str) -> list[PreparedDetail]:
        """Staged attempts of *sink_id* with their row counts (their age is unknown)."""
        from twopc.spi import PreparedDetail  # twopc status's: a write's workers never build one
        return [PreparedDetail(h, "staged rows", None, rows) for h, rows in self._staged(sink_id)]

    def _staged(self, sink_id: str) -> list[tuple[StagingHandle, int]]:
        with self.session("list staged transactions") as conn, fresh(conn):
            counts = self.staged_counts(conn, Xid.prefix(sink_id))
        out = [(h, rows) for txn_id, rows in counts.items()
               if (h := self.parse_txn_id(txn_id)) is not None and h.sink_id == sink_id]
        return sorted(out, key=lambda p: (p[0].batch_id, p[0].txn_id))

    def parse_txn_id(self, txn_id: str) -> StagingHandle | None:
        """Rebuild a handle from a staged transaction id (``None`` if it is not one)."""
        xid = Xid.parse(txn_id)
        if xid is None or xid.text != txn_id:
            return None
        return StagingHandle(txn_id, xid.sink_id, xid.batch_id, xid.partition_id, xid.attempt_id,
                             table=self.table.display(), stage_table=self.stage.display(), rows=-1)

    def purge_markers(self, sink_id: str, below_batch: int) -> int:
        """Delete the batch markers of *sink_id* below *below_batch*; return how many."""
        with self.session(f"purge batch markers from {self.batches.display()}") as conn:
            with fresh(conn):
                stmt = sa.text(f"DELETE FROM {self.batches.quoted(conn.dialect)} "
                               f"WHERE sink_id = :s AND batch_id < :b")
                result = conn.execute(stmt, {"s": sink_id, "b": below_batch})
            return int(result.rowcount)
