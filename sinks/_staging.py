"""Portable ``staging`` commit mode: exactly-once writes to any SQLAlchemy database with
transactions (PostgreSQL, MySQL/MariaDB, SQLite, ...), no two-phase commit needed.

Each task attempt loads its rows, tagged with its transaction id
(``twopc:{sink}:{batch}:{partition}:{attempt}:{8 hex}``), into a durable staging table
and commits that local transaction: this is its *prepare* (durable, invisible in the
target). The driver's commit then runs ONE local transaction that

1. returns ``ALREADY_COMMITTED`` if the batch marker ``(sink_id, batch_id)`` exists
   (a replay), deleting the replay's staged rows;
2. checks that every chosen attempt's staged row count equals its handle's count (a
   staged attempt that vanished makes the commit raise, with nothing written);
3. runs the write's DDL, if any: ``CREATE TABLE`` when the target is missing; for
   overwrite ``TRUNCATE``/``DELETE`` (``truncate=true``) or ``DROP`` + ``CREATE``;
4. moves the chosen attempts' rows: ``INSERT INTO target SELECT ... FROM staging``
   (``ON CONFLICT ... DO UPDATE`` / ``ON DUPLICATE KEY UPDATE`` with ``upsertKeys``);
5. deletes them from staging and inserts the batch marker.

Readers therefore see the old table or the new one, never a part (overwrite included,
where the database's DDL is transactional: PostgreSQL and SQLite; on MySQL/MariaDB DDL
commits implicitly, so there overwrite deletes and inserts, keeping the table, and a
missing table is created at validation, before any task runs).

Staged rows of attempts that were not chosen are deleted by :meth:`abort` (the
coordinator's sweep, or recovery). Staged rows of writes without a checkpoint whose
driver died (sink ids ``eph-...``) are deleted after ``stagingRetention`` hours by the
next write: deleting them is always safe, because a commit that finds fewer staged rows
than its handles promise writes nothing.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, SQLAlchemyError

from twopc import (
    ephemeral_started,
    CommitOutcome,
    ConfigurationError,
    ProtocolError,
    SchemaMismatchError,
    SinkError,
    SinkUnavailableError,
    TargetConfigurationError,
    TransactionContext,
    TransactionHandle,
    TransactionLostError,
    TwoPhaseCommitSink,
    redact,
)

from ._arrow_copy import BINARY_HEADER, BINARY_TRAILER, binary_supported, encode_binary, encode_csv, normalize_array
from ._engines import EngineCache
from ._jdbc_options import secret_forms
from ._sqltypes import TableName, create_table_sql, parse_table_name

__all__ = ["StagingHandle", "StagingSink", "WriteMode"]

log = logging.getLogger("twopc.sinks.staging")

TXN_PREFIX = "twopc"
EPHEMERAL_PREFIX = "eph-"  # sink ids of writes without a checkpoint (twopc.ephemeral_sink_id)
_TXN_RE = re.compile(r"^twopc:([A-Za-z0-9][A-Za-z0-9_.-]{0,63}):(\d+):(\d+):(\d+):([0-9a-f]{8})$")
_TXN_COL = "twopc_txn"
_COPY_CHUNK = 1 << 20
_ISOLATION = {"READ_UNCOMMITTED": "READ UNCOMMITTED", "READ_COMMITTED": "READ COMMITTED",
              "REPEATABLE_READ": "REPEATABLE READ", "SERIALIZABLE": "SERIALIZABLE"}

WriteMode = str
"""``append`` | ``overwrite`` | ``errorifexists`` | ``ignore`` (Spark's save modes)."""
_MODES = ("append", "overwrite", "errorifexists", "ignore")


@dataclass(frozen=True)
class StagingHandle(TransactionHandle, kind="twopc.staging", version=1):
    """Rows of one task attempt, committed into the staging table under ``txn_id``.

    Attributes:
        table: the target table (display name).
        stage_table: the staging table (display name).
        rows: rows staged; ``-1`` when unknown (handles rebuilt by ``list_prepared``).
    """

    table: str = ""
    stage_table: str = ""
    rows: int = -1


@dataclass(eq=False)
class _StageTxn:
    context: TransactionContext
    txn_id: str
    conn: Connection | None
    rows: int = 0
    prepared: bool = False
    copy: Any = None  # PostgreSQL: (cursor, copy context, copy, binary)
    pg_plan: dict[pa.Schema, tuple[list[Any], bool]] = field(default_factory=dict)


# -- engines: one per process and URL ---------------------------------------------------

_ENGINES = EngineCache()


def _sqlite_begin_immediate(engine: Engine) -> None:
    """pysqlite's own transaction handling skips BEGIN before DDL; take over (SQLAlchemy's
    documented recipe) and start every transaction with BEGIN IMMEDIATE (writers queue on
    the busy timeout instead of failing on a lock upgrade)."""

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def engine_for(url: URL, connect_timeout: int) -> Engine:
    """The process's pooled engine for *url* (forked children start afresh)."""

    def make() -> Engine:
        backend = url.get_backend_name()
        args: dict[str, Any] = {}
        if backend == "sqlite":
            args = {"timeout": max(60, connect_timeout)}
        elif backend == "postgresql":
            args = {"connect_timeout": connect_timeout, "application_name": "twopc"}
        elif backend in ("mysql", "mariadb"):
            args = {"connect_timeout": connect_timeout}
        engine = sa.create_engine(url, pool_pre_ping=True, connect_args=args)
        if backend == "sqlite":
            _sqlite_begin_immediate(engine)
        return engine

    return _ENGINES.get((url.render_as_string(hide_password=False), connect_timeout), make)


def _stage_name(target: TableName) -> str:
    import hashlib

    digest = hashlib.sha256(f"{target.schema}.{target.name}".encode()).hexdigest()[:12]
    return f"twopc_stage_{digest}"


class StagingSink(TwoPhaseCommitSink[dict[str, Any], _StageTxn, StagingHandle]):
    """Exactly-once writes through a staging table and one local commit transaction.

    Args:
        url: SQLAlchemy URL with credentials (``postgresql+psycopg://``,
            ``mysql+pymysql://``, ``sqlite:///file.db``, ...).
        table: ``[schema.]table`` in the database's syntax (quote special names).
        mode: Spark's save mode, see :data:`WriteMode`.
        truncate: with ``overwrite``, empty the table instead of re-creating it.
        upsert_keys: key columns: rows whose key exists update it instead of failing.
        create_table_options / create_table_column_types / table_comment: Spark's
            options for tables twopc creates.
        batch_size: rows per ``INSERT`` round trip (not used by PostgreSQL's COPY).
        isolation_level: Spark's name (``READ_COMMITTED``...), or ``None`` for the
            database's default.
        session_init_statement: SQL run at the start of every transaction.
        query_timeout: seconds per statement (PostgreSQL, MariaDB); 0 = none.
        stage_table: the staging table's name (default ``twopc_stage_<hash of target>``
            in the target's schema).
        batch_table: the table of committed batch markers.
        retention_hours: age after which staged rows of dead ``eph-`` writes are deleted.
        copy_format: PostgreSQL COPY format for staging: ``auto``, ``binary``, ``csv``.
        secrets: strings to redact from error messages (the password, as typed).

    Raises:
        ConfigurationError: an argument is invalid.
    """

    handle_type = StagingHandle

    def __init__(self, url: URL | str, table: str, *, mode: WriteMode = "append", truncate: bool = False,
                 upsert_keys: Sequence[str] = (), create_table_options: str = "",
                 create_table_column_types: Mapping[str, str] | None = None, table_comment: str = "",
                 batch_size: int = 1000,
                 isolation_level: str | None = None, session_init_statement: str | None = None,
                 query_timeout: int = 0, stage_table: str | None = None, batch_table: str = "twopc_batches",
                 lock_timeout_s: int = 30, connect_timeout: int = 10, retention_hours: float = 24.0,
                 copy_format: str = "auto", secrets: Sequence[str] = ()) -> None:
        u = make_url(url) if isinstance(url, str) else url
        self._url = u.render_as_string(hide_password=False)
        self._dialect_name = u.get_backend_name()
        if self._dialect_name == "mariadb":
            self._dialect_name = "mysql"
        if mode not in _MODES:
            raise ConfigurationError(f"save mode must be one of {', '.join(_MODES)}, got {mode!r}")
        if isolation_level is not None and isolation_level not in _ISOLATION:
            raise ConfigurationError(f"isolationLevel must be one of {', '.join(_ISOLATION)}, got {isolation_level!r}")
        if batch_size < 1:
            raise ConfigurationError("batchsize must be >= 1")
        self.mode = mode
        self.truncate = truncate
        self.upsert_keys = tuple(upsert_keys)
        self.create_table_options = create_table_options
        self.create_table_column_types = dict(create_table_column_types or {})
        if table_comment and self._dialect_name not in ("postgresql", "mysql"):
            raise ConfigurationError(f"tableComment is not supported on {self._dialect_name}: remove the option")
        self.table_comment = table_comment
        self.batch_size = batch_size
        self.isolation_level = isolation_level
        self.session_init_statement = session_init_statement
        self.query_timeout = int(query_timeout)
        self.target = parse_table_name(table, self._dialect_name)
        self.stage = (parse_table_name(stage_table, self._dialect_name, "stagingTable") if stage_table
                      else self.target.sibling(_stage_name(self.target)))
        self.batches = parse_table_name(batch_table, self._dialect_name, "batch marker table")
        if self.batches.schema is None and self.target.schema is not None and self._dialect_name != "sqlite":
            self.batches = self.target.sibling(self.batches.name)
        self.lock_timeout_s = int(lock_timeout_s)
        self.connect_timeout = int(connect_timeout)
        self.retention_hours = float(retention_hours)
        if copy_format not in ("auto", "binary", "csv"):
            raise ConfigurationError(f"copyFormat must be auto, binary or csv, got {copy_format!r}")
        self.copy_format = copy_format
        self._secrets = secret_forms([*secrets, u.password])
        self.schema: pa.Schema | None = None
        self.streaming = False
        if self.upsert_keys and mode == "overwrite":
            log.info("twopc staging: upsertKeys with overwrite: the table is emptied first, keys only dedupe")

    # -- description ----------------------------------------------------------------------
    def _url_obj(self) -> URL:
        return make_url(self._url)

    def describe(self) -> str:
        return f"{self._dialect_name} {self._url_obj().render_as_string(hide_password=True)} table " \
               f"{self.target.display()} (staging via {self.stage.display()})"

    def __repr__(self) -> str:
        return f"StagingSink({self.describe()})"

    def _redact(self, text: str) -> str:
        return redact(text, self._secrets)

    @property
    def commits_atomically(self) -> bool:
        return True

    def configure_write(self, schema: pa.Schema, *, overwrite: bool, streaming: bool, checkpointed: bool) -> None:
        """Remember the DataFrame schema; Spark's overwrite flag turns ``append`` into
        ``overwrite`` (``outputMode("complete")`` replaces the table every micro-batch).

        Raises:
            ConfigurationError: overwrite together with ``saveMode`` errorifexists/ignore.
        """
        if overwrite:
            if self.mode in ("errorifexists", "ignore"):
                raise ConfigurationError(
                    f"saveMode {self.mode} contradicts Spark's overwrite mode: drop one of them")
            self.mode = "overwrite"
        self.schema = schema
        self.streaming = streaming

    # -- connections ------------------------------------------------------------------------
    def _engine(self) -> Engine:
        return engine_for(self._url_obj(), self.connect_timeout)

    def _connect(self) -> Connection:
        try:
            conn = self._engine().connect()
        except (DBAPIError, OSError) as exc:
            raise self._unavailable(exc) from None
        if self.isolation_level is not None and self._dialect_name != "sqlite":
            conn = conn.execution_options(isolation_level=_ISOLATION[self.isolation_level])
        return conn

    def _unavailable(self, exc: BaseException) -> SinkUnavailableError:
        orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        reason = self._redact(" ".join(str(orig).split()) or type(orig).__name__)
        u = self._url_obj()
        where = u.database if self._dialect_name == "sqlite" else f"{u.host}:{u.port or ''}/{u.database or ''}"
        return SinkUnavailableError(f"cannot connect to {self._dialect_name} at {where}: {reason}")

    def _begin(self, conn: Connection) -> None:
        """Start a transaction with the session settings of a write."""
        _fresh(conn)
        d = self._dialect_name
        if d == "postgresql":
            conn.exec_driver_sql(
                "SELECT set_config('lock_timeout', %(l)s, true), set_config('TimeZone', 'UTC', true), "
                "set_config('statement_timeout', %(s)s, true)",
                {"l": f"{self.lock_timeout_s}s", "s": f"{self.query_timeout}s"})
        elif d == "mysql":
            conn.exec_driver_sql(f"SET SESSION innodb_lock_wait_timeout = {int(self.lock_timeout_s)}")
            conn.exec_driver_sql("SET SESSION time_zone = '+00:00'")
            if self.query_timeout:
                conn.exec_driver_sql(f"SET SESSION max_statement_time = {int(self.query_timeout)}")
        if self.session_init_statement:
            conn.exec_driver_sql(self.session_init_statement)

    def _q(self, name: str) -> str:
        return self._engine().dialect.identifier_preparer.quote_identifier(name)

    def _error(self, exc: BaseException, action: str) -> SinkError:
        """A credential-free error naming the violated constraint when there is one."""
        if isinstance(exc, OperationalError) and _is_disconnect(exc):
            return self._unavailable(exc)
        orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        text = self._redact(" ".join(str(orig).split()))[:600]
        if isinstance(exc, IntegrityError):
            diag = getattr(orig, "diag", None)
            what = []
            if diag is not None and getattr(diag, "column_name", None):
                what.append(f"column {diag.column_name!r}")
            if diag is not None and getattr(diag, "constraint_name", None):
                what.append(f"constraint {diag.constraint_name!r}")
            named = f" ({', '.join(what)})" if what else ""
            return SinkError(f"could not {action}: a constraint of {self.target.display()} was violated{named}: "
                             f"{text}. The whole batch was rolled back: nothing was written")
        return SinkError(f"could not {action}: {text}; the transaction was rolled back")

    # -- validation (driver, plan time) --------------------------------------------------
    def validate(self, schema: pa.Schema) -> None:
        """Check the target against the DataFrame and prepare staging.

        Creates the staging table (re-creating it when it is empty and its columns no
        longer fit) and the batch marker table; on MySQL/MariaDB also a missing target
        (DDL there cannot join the commit transaction). Deletes staged rows of dead
        ``eph-`` writes older than the retention.

        Raises:
            SinkUnavailableError: no connection.
            TargetConfigurationError: ``errorifexists`` and the table exists; the staging
                table holds rows of an unfinished write with other columns; DDL refused.
            SchemaMismatchError: the DataFrame does not fit the existing table, or
                ``upsertKeys`` has no matching unique constraint.
        """
        self.schema = schema
        conn = self._connect()
        try:
            exists = self._has_table(conn, self.target)
            if exists and self.mode == "errorifexists":
                raise TargetConfigurationError(
                    f"table {self.target.display()} already exists and the save mode is errorifexists: "
                    f"use mode append or overwrite, or drop the table")
            recreate = self.mode == "overwrite" and not self.truncate
            ddl = self._create_ddl(conn)  # maps every column type now: errors before any task runs
            if exists and not recreate:
                self._check_columns(conn, schema)
            if self.upsert_keys:
                missing = [k for k in self.upsert_keys if k.lower() not in {n.lower() for n in schema.names}]
                if missing:
                    raise SchemaMismatchError(f"upsertKeys {missing} are not DataFrame columns ({schema.names})")
                if exists and not recreate:
                    self._check_unique(conn)
            if not exists and self._dialect_name == "mysql" and self.mode != "ignore":
                with _fresh(conn):
                    conn.exec_driver_sql(ddl)
                log.info("twopc staging: created %s (MySQL DDL cannot join the commit transaction)",
                         self.target.display())
            self._ensure_stage(conn, schema)
            self._ensure_batches(conn)
            self._expire_ephemeral(conn)
        except SQLAlchemyError as exc:
            raise self._error(exc, f"validate {self.target.display()}") from None
        finally:
            conn.close()

    def _create_ddl(self, conn: Connection) -> str:
        assert self.schema is not None
        ddl = create_table_sql(self.target, self.schema, conn.dialect, overrides=self.create_table_column_types,
                               options="", extra_columns=())
        if self.upsert_keys:
            keys = ", ".join(self._q(self._df_name(k)) for k in self.upsert_keys)
            ddl = ddl[:ddl.rindex(")")] + f", PRIMARY KEY ({keys}))"
        if self.create_table_options.strip():
            ddl += " " + self.create_table_options.strip()
        if self.table_comment and self._dialect_name == "mysql":
            ddl += " COMMENT = " + _sql_string(self.table_comment, backslash=True)
        return ddl

    def _df_name(self, key: str) -> str:
        assert self.schema is not None
        return next((n for n in self.schema.names if n.lower() == key.lower()), key)

    @staticmethod
    def _has_table(conn: Connection, t: TableName) -> bool:
        return sa.inspect(conn).has_table(t.name, schema=t.schema)

    def _target_columns(self, conn: Connection) -> list[dict[str, Any]]:
        return [dict(c) for c in sa.inspect(conn).get_columns(self.target.name, schema=self.target.schema)]

    def _check_columns(self, conn: Connection, schema: pa.Schema) -> None:
        cols = self._target_columns(conn)
        by_lower: dict[str, list[dict[str, Any]]] = {}
        for c in cols:
            by_lower.setdefault(c["name"].lower(), []).append(c)
        problems = []
        used = set()
        for f in schema:
            exact = [c for c in cols if c["name"] == f.name]
            cands = exact or by_lower.get(f.name.lower(), [])
            if len(cands) != 1:
                problems.append(f"column {f.name}: not in table {self.target.display()}")
                continue
            col = cands[0]
            used.add(col["name"])
            if not _type_fits(f.type, col["type"]):
                problems.append(f"column {f.name}: DataFrame type {f.type}, table type {col['type']}")
        for c in cols:
            if (c["name"] not in used and not c.get("nullable", True) and c.get("default") is None
                    and not c.get("autoincrement") is True and c.get("computed") is None
                    and c.get("identity") is None):
                problems.append(f"column {c['name']}: NOT NULL without default in "
                                f"{self.target.display()} but absent from the DataFrame")
        if problems:
            table_cols = ", ".join(f"{c['name']} {c['type']}" for c in cols)
            raise SchemaMismatchError(f"the DataFrame does not fit table {self.target.display()}: "
                                      + "; ".join(problems) + f". Table columns: {table_cols}")

    def _check_unique(self, conn: Connection) -> None:
        insp = sa.inspect(conn)
        want = {k.lower() for k in self.upsert_keys}
        sets: list[set[str]] = []
        pk = insp.get_pk_constraint(self.target.name, schema=self.target.schema)
        if pk and pk.get("constrained_columns"):
            sets.append({c.lower() for c in pk["constrained_columns"]})
        for u in insp.get_unique_constraints(self.target.name, schema=self.target.schema):
            sets.append({c.lower() for c in u["column_names"]})
        for ix in insp.get_indexes(self.target.name, schema=self.target.schema):
            if ix.get("unique"):
                sets.append({c.lower() for c in ix["column_names"] if c})
        if want not in sets:
            raise SchemaMismatchError(
                f"upsertKeys ({', '.join(self.upsert_keys)}) need a primary key or unique constraint on exactly "
                f"those columns of {self.target.display()}: e.g. ALTER TABLE {self.target.display()} ADD UNIQUE "
                f"({', '.join(self.upsert_keys)})")

    def _stage_table(self, schema: pa.Schema) -> sa.Table:
        from ._sqltypes import arrow_to_sqlalchemy

        md = sa.MetaData()
        txn_col = sa.Column(_TXN_COL, sa.String(200), nullable=False)
        if self._dialect_name == "postgresql":
            txn_col = sa.Column(_TXN_COL, sa.Text(), nullable=False,
                                server_default=sa.text("current_setting('twopc.txn_id')"))
        return sa.Table(self.stage.name, md, txn_col,
                        *[sa.Column(f.name, arrow_to_sqlalchemy(f), nullable=True) for f in schema],
                        schema=self.stage.schema)

    def _ensure_stage(self, conn: Connection, schema: pa.Schema) -> None:
        want = [_TXN_COL] + list(schema.names)
        if self._has_table(conn, self.stage):
            have = [c["name"] for c in sa.inspect(conn).get_columns(self.stage.name, schema=self.stage.schema)]
            if have == want:
                return
            with _fresh(conn):
                n = conn.execute(sa.text(f"SELECT count(*) FROM {self.stage.quoted(conn.dialect)}")).scalar_one()
                if n:
                    raise TargetConfigurationError(
                        f"staging table {self.stage.display()} holds {n} rows of an unfinished write whose "
                        f"columns differ from this DataFrame's; finish it first (python -m recovery with that "
                        f"query's checkpoint) or delete them")
                conn.exec_driver_sql(f"DROP TABLE {self.stage.quoted(conn.dialect)}")
        try:
            with _fresh(conn):
                self._stage_table(schema).create(conn, checkfirst=True)
        except SQLAlchemyError:
            if not self._has_table(conn, self.stage):  # else: created concurrently
                raise

    def _batches_table(self) -> sa.Table:
        return sa.Table(self.batches.name, sa.MetaData(),
                        sa.Column("sink_id", sa.String(64), primary_key=True),
                        sa.Column("batch_id", sa.BigInteger, primary_key=True, autoincrement=False),
                        sa.Column("rows", sa.BigInteger, nullable=False),
                        sa.Column("committed_at", sa.DateTime, nullable=False),
                        schema=self.batches.schema)

    def _ensure_batches(self, conn: Connection) -> None:
        if self._has_table(conn, self.batches):
            return
        try:
            with _fresh(conn):
                self._batches_table().create(conn, checkfirst=True)
        except SQLAlchemyError:
            if not self._has_table(conn, self.batches):
                raise

    def _expire_ephemeral(self, conn: Connection) -> None:
        """Delete staged rows of ``eph-`` writes (no checkpoint) whose driver started more
        than the retention ago: it is gone, or, if alive, its commit will find rows missing
        and write nothing — never half."""
        now = dt.datetime.now(dt.UTC).timestamp()
        stale = []
        for txn_id in self._staged_txns(conn, EPHEMERAL_PREFIX, prefix_only=True):
            started = ephemeral_started(txn_id.split(":")[1])
            if started is not None and now - started > self.retention_hours * 3600:
                stale.append(txn_id)
        if stale:
            with _fresh(conn):
                self._delete_staged(conn, stale)
            log.warning("twopc staging: deleted staged rows of %s abandoned writes from %s", len(stale),
                        self.stage.display())

    # -- executor side -------------------------------------------------------------------
    def make_txn_id(self, ctx: TransactionContext) -> str:
        txn = (f"{TXN_PREFIX}:{ctx.sink_id}:{int(ctx.batch_id)}:{int(ctx.partition_id)}:"
               f"{int(ctx.attempt_id)}:{secrets.token_hex(4)}")
        if not _TXN_RE.match(txn):
            raise ProtocolError(f"sink id {ctx.sink_id!r} is not valid in a twopc transaction id")
        return txn

    def begin_transaction(self, context: TransactionContext) -> _StageTxn:
        """Open a local transaction for this attempt's staged rows.

        Raises:
            SinkUnavailableError: no connection.
        """
        txn_id = self.make_txn_id(context)
        conn = self._connect()
        txn = _StageTxn(context, txn_id, conn)
        try:
            self._begin(conn)
            if self._dialect_name == "postgresql":
                conn.exec_driver_sql("SELECT set_config('twopc.txn_id', %(t)s, true)", {"t": txn_id})
        except SQLAlchemyError as exc:
            self._close(txn)
            raise self._error(exc, "begin a staging transaction") from None
        return txn

    def invoke(self, txn: _StageTxn, value: dict[str, Any]) -> None:
        """Stage one row (dict of column -> value)."""
        self.invoke_batch(txn, pa.RecordBatch.from_pylist([value]))

    def invoke_batch(self, txn: _StageTxn, batch: pa.RecordBatch) -> None:
        """Stage an Arrow batch: PostgreSQL COPY (binary when possible) straight from
        Arrow; elsewhere multi-row ``INSERT`` in chunks of ``batchsize``.

        Raises:
            ConfigurationError: a string holds a NUL byte.
            SinkError: the database rejected the rows (the attempt is rolled back).
        """
        if txn.conn is None or txn.prepared:
            raise ProtocolError(f"staging transaction {txn.txn_id} is not open")
        if batch.num_rows == 0:
            return
        try:
            if self._dialect_name == "postgresql":
                self._copy_batch(txn, batch)
            else:
                self._insert_batch(txn, batch)
            txn.rows += batch.num_rows
        except SQLAlchemyError as exc:
            self.rollback(txn)
            raise self._error(exc, f"stage rows for {self.target.display()}") from None
        except Exception as exc:
            import psycopg

            self.rollback(txn)
            if isinstance(exc, psycopg.Error):
                raise SinkError(f"could not stage rows for {self.target.display()}: "
                                f"{self._redact(' '.join(str(exc).split()))[:400]}") from None
            raise

    def _insert_batch(self, txn: _StageTxn, batch: pa.RecordBatch) -> None:
        assert txn.conn is not None
        names = batch.schema.names
        columns = []
        for name, arr, f in zip(names, batch.columns, batch.schema, strict=True):
            if pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
                _check_nul(name, arr)
            values = arr.to_pylist()
            if pa.types.is_timestamp(f.type) and f.type.tz is not None:
                values = [v.astimezone(dt.UTC).replace(tzinfo=None) if v is not None else None for v in values]
            columns.append(values)
        cols = ", ".join(self._q(n) for n in [_TXN_COL, *names])
        marks = ", ".join(["%s"] * (len(names) + 1)) if self._dialect_name == "mysql" else \
            ", ".join(["?"] * (len(names) + 1))
        sql = f"INSERT INTO {self.stage.quoted(txn.conn.dialect)} ({cols}) VALUES ({marks})"
        rows = list(zip([txn.txn_id] * batch.num_rows, *columns, strict=True))
        for i in range(0, len(rows), self.batch_size):
            txn.conn.exec_driver_sql(sql, rows[i:i + self.batch_size])

    def _copy_batch(self, txn: _StageTxn, batch: pa.RecordBatch) -> None:
        from psycopg import sql as pgsql

        from ._postgres import PostgresSink, _match_columns

        assert txn.conn is not None
        pg: Any = txn.conn.connection.driver_connection
        plan = txn.pg_plan.get(batch.schema)
        if plan is None:
            oid = PostgresSink._table_oid(pg, self.stage.schema, self.stage.name)  # type: ignore[arg-type]
            if oid is None:
                raise SinkError(f"staging table {self.stage.display()} does not exist (validate() creates it)")
            cols = _match_columns(batch.schema.names, [f.type for f in batch.schema],
                                  PostgresSink._columns(pg, oid), self.stage.display(),  # type: ignore[arg-type]
                                  check_types=True, check_required=False)
            bad = [c.name for f, c in zip(batch.schema, cols, strict=True) if not binary_supported(f.type, c)]
            binary = self.copy_format == "binary" or (self.copy_format == "auto" and not bad)
            plan = (cols, binary)
            txn.pg_plan[batch.schema] = plan
        cols, binary = plan
        key = (tuple(c.name for c in cols), binary)
        if txn.copy is None or txn.copy[0] != key:
            self._end_copy(txn)
            ident = (pgsql.Identifier(self.stage.schema, self.stage.name) if self.stage.schema
                     else pgsql.Identifier(self.stage.name))
            stmt = pgsql.SQL("COPY {} ({}) FROM STDIN (FORMAT {})").format(
                ident, pgsql.SQL(", ").join(pgsql.Identifier(c.name) for c in cols),
                pgsql.SQL("binary" if binary else "csv"))
            cur = pg.cursor()
            ctx = cur.copy(stmt)
            copy = ctx.__enter__()
            if binary:
                copy.write(BINARY_HEADER)
            txn.copy = (key, cur, ctx, copy)
        copy = txn.copy[3]
        arrays = [normalize_array(a) for a in batch.columns]
        for chunk in (encode_binary if binary else encode_csv)(arrays, batch.schema.names, cols):
            for i in range(0, len(chunk), _COPY_CHUNK):
                copy.write(chunk[i:i + _COPY_CHUNK])

    @staticmethod
    def _end_copy(txn: _StageTxn) -> None:
        open_copy, txn.copy = txn.copy, None
        if open_copy is None:
            return
        key, cur, ctx, copy = open_copy
        try:
            if key[1]:
                copy.write(BINARY_TRAILER)
            ctx.__exit__(None, None, None)
        finally:
            cur.close()

    def pre_commit(self, txn: _StageTxn) -> StagingHandle:
        """Commit the staged rows locally (durable, invisible in the target).

        Raises:
            SinkError / SinkUnavailableError: the database failed; nothing is staged.
        """
        if txn.conn is None or txn.prepared:
            raise ProtocolError(f"staging transaction {txn.txn_id} is not open")
        try:
            self._end_copy(txn)
            txn.conn.commit()
        except Exception as exc:
            self.rollback(txn)
            if isinstance(exc, SQLAlchemyError):
                raise self._error(exc, f"stage rows for {self.target.display()}") from None
            raise SinkError(f"could not stage rows for {self.target.display()}: "
                            f"{self._redact(' '.join(str(exc).split()))[:400]}") from None
        txn.prepared = True
        self._close(txn)
        ctx = txn.context
        return StagingHandle(txn.txn_id, ctx.sink_id, ctx.batch_id, ctx.partition_id, ctx.attempt_id,
                             table=self.target.display(), stage_table=self.stage.display(), rows=txn.rows)

    def rollback(self, txn: _StageTxn) -> None:
        """Discard an attempt's unstaged rows. Idempotent; never raises."""
        if txn.prepared or txn.conn is None:
            return
        if txn.copy is not None:
            _key, cur, ctx, _copy = txn.copy
            txn.copy = None
            try:
                exc = SinkError("rolled back")
                ctx.__exit__(type(exc), exc, None)
            except Exception:  # noqa: BLE001
                pass
            try:
                cur.close()
            except Exception:  # noqa: BLE001
                pass
        try:
            txn.conn.rollback()
        except Exception:  # noqa: BLE001 - closing the connection rolls back too
            log.debug("twopc staging: rollback of %s failed", txn.txn_id, exc_info=True)
            try:
                txn.conn.invalidate()
            except Exception:  # noqa: BLE001
                pass
        self._close(txn)

    @staticmethod
    def _close(txn: _StageTxn) -> None:
        conn, txn.conn = txn.conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass

    # -- driver side ---------------------------------------------------------------------
    def _checked(self, handle: TransactionHandle) -> str:
        if not isinstance(handle, StagingHandle) or not _TXN_RE.match(handle.txn_id):
            raise ProtocolError(f"handle {handle.txn_id!r:.80} is not a twopc staging transaction")
        return handle.txn_id

    def commit(self, handle: StagingHandle) -> CommitOutcome:
        """Commit one handle as a batch of its own (the runtime uses :meth:`commit_all`)."""
        return self.commit_all([handle])[0]

    def commit_all(self, handles: Sequence[StagingHandle], *, recovering: bool = False) -> list[CommitOutcome]:
        """Move the rows of *handles* (one batch's chosen attempts) into the target and
        write the batch marker, in one local transaction. Idempotent.

        Returns:
            ``COMMITTED`` for each, or ``ALREADY_COMMITTED`` for each when the batch
            marker exists (the replay's staged rows are deleted).

        Raises:
            TransactionLostError: an attempt's staged rows are missing or incomplete;
                nothing was written.
            SinkError: the database refused (a constraint, a type), nothing was written;
                the message names the constraint.
            SinkUnavailableError: the connection failed; nothing or everything was
                committed, and a retry answers accordingly.
        """
        if not handles:
            return []
        ids = [self._checked(h) for h in handles]
        batch_ids = {(h.sink_id, h.batch_id) for h in handles}
        if len(batch_ids) != 1:
            raise ProtocolError(f"commit_all takes handles of one batch, got {sorted(batch_ids)}")
        sink_id, batch_id = batch_ids.pop()
        conn = self._connect()
        try:
            self._begin(conn)
            d = conn.dialect
            marker = conn.execute(sa.text(
                f"SELECT {self._q('rows')} FROM {self.batches.quoted(d)} WHERE sink_id = :s AND batch_id = :b"),
                {"s": sink_id, "b": batch_id}).first()
            if marker is not None:
                self._delete_staged(conn, ids)
                conn.commit()
                return [CommitOutcome.ALREADY_COMMITTED] * len(handles)
            counts: dict[str, int] = dict(conn.execute(
                sa.text(f"SELECT {self._q(_TXN_COL)}, count(*) FROM {self.stage.quoted(d)} "
                        f"WHERE {self._q(_TXN_COL)} IN :ids GROUP BY {self._q(_TXN_COL)}")
                .bindparams(sa.bindparam("ids", expanding=True)), {"ids": ids}).all())
            bad = [h.txn_id for h in handles if counts.get(h.txn_id, 0) != h.rows and not
                   (h.rows < 0 and counts.get(h.txn_id, 0) > 0)]
            if bad:
                conn.rollback()
                raise TransactionLostError(
                    f"batch {batch_id} of sink {sink_id!r}: staged rows of {bad} are missing from "
                    f"{self.stage.display()} (were they deleted?); nothing was written to {self.target.display()}")
            total = sum(counts.values())
            self._move(conn, ids)
            conn.execute(sa.text(f"INSERT INTO {self.batches.quoted(d)} "
                                 f"(sink_id, batch_id, {self._q('rows')}, committed_at) "
                                 f"VALUES (:s, :b, :r, :t)"),
                         {"s": sink_id, "b": batch_id, "r": total,
                          "t": dt.datetime.now(dt.UTC).replace(tzinfo=None)})
            conn.commit()
        except SQLAlchemyError as exc:
            _quiet_rollback(conn)
            raise self._error(exc, f"commit batch {batch_id} into {self.target.display()}") from None
        except BaseException:
            _quiet_rollback(conn)
            raise
        finally:
            conn.close()
        log.info("twopc staging: committed batch %s of %s: %s rows into %s", batch_id, sink_id, total,
                 self.target.display())
        return [CommitOutcome.COMMITTED] * len(handles)

    def _move(self, conn: Connection, ids: list[str]) -> None:
        """DDL of the write mode, then INSERT ... SELECT of the chosen attempts' rows."""
        d = conn.dialect
        t = self.target.quoted(d)
        exists = self._has_table(conn, self.target)
        if self.mode == "errorifexists" and exists:
            raise TargetConfigurationError(
                f"table {self.target.display()} was created by someone else while this write ran, and the "
                f"save mode is errorifexists: nothing was written")
        if self.mode == "ignore" and exists:
            self._delete_staged(conn, ids)
            log.info("twopc staging: %s exists and the save mode is ignore: wrote nothing", self.target.display())
            return
        if self.mode == "overwrite" and exists:
            if self.truncate or self._dialect_name == "mysql":
                conn.exec_driver_sql(f"TRUNCATE TABLE {t}" if self._dialect_name == "postgresql"
                                     else f"DELETE FROM {t}")
            else:
                conn.exec_driver_sql(f"DROP TABLE {t}")
                exists = False
        if not exists:
            if self.schema is None:
                raise SchemaMismatchError(
                    f"{self.target.display()} does not exist and this process does not know the DataFrame "
                    f"schema to create it (recovery without a query): create the table, then recover")
            conn.exec_driver_sql(self._create_ddl(conn))
            if self.table_comment and self._dialect_name == "postgresql":
                conn.exec_driver_sql(f"COMMENT ON TABLE {t} IS {_sql_string(self.table_comment, backslash=False)}")
        stage_cols = [c["name"] for c in sa.inspect(conn).get_columns(self.stage.name, schema=self.stage.schema)
                      if c["name"] != _TXN_COL]
        target_cols = [c["name"] for c in self._target_columns(conn)]
        mapping = []
        for s in stage_cols:
            exact = [c for c in target_cols if c == s] or [c for c in target_cols if c.lower() == s.lower()]
            if len(exact) != 1:
                raise SchemaMismatchError(f"staged column {s} matches no single column of {self.target.display()}")
            mapping.append((s, exact[0]))
        ins = ", ".join(self._q(tc) for _, tc in mapping)
        sel = ", ".join(self._q(sc) for sc, _ in mapping)
        where = f"WHERE {self._q(_TXN_COL)} IN :ids"
        src = self.stage.quoted(d)
        sql = f"INSERT INTO {t} ({ins}) SELECT {sel} FROM {src} {where}"
        if self.upsert_keys:
            keys = []
            for k in self.upsert_keys:
                m = [tc for sc, tc in mapping if sc.lower() == k.lower()]
                keys.append(m[0] if m else k)
            keyset = {k.lower() for k in keys}
            others = [tc for _, tc in mapping if tc.lower() not in keyset]
            qk = ", ".join(self._q(k) for k in keys)
            if self._dialect_name == "postgresql":
                skeys = ", ".join(self._q(sc) for sc, tc in mapping if tc.lower() in keyset)
                sets = ", ".join(f"{self._q(c)} = EXCLUDED.{self._q(c)}" for c in others)
                sql = (f"INSERT INTO {t} ({ins}) SELECT DISTINCT ON ({skeys}) {sel} FROM {src} {where} "
                       f"ORDER BY {skeys}, ctid DESC ON CONFLICT ({qk}) "
                       + (f"DO UPDATE SET {sets}" if others else "DO NOTHING"))
            elif self._dialect_name == "sqlite":
                sets = ", ".join(f"{self._q(c)} = excluded.{self._q(c)}" for c in others)
                sql = (f"INSERT INTO {t} ({ins}) SELECT {sel} FROM {src} {where} ORDER BY rowid "
                       f"ON CONFLICT ({qk}) " + (f"DO UPDATE SET {sets}" if others else "DO NOTHING"))
            elif self._dialect_name == "mysql":
                sets = ", ".join(f"{self._q(c)} = VALUES({self._q(c)})" for c in (others or keys[:1]))
                sql = f"INSERT INTO {t} ({ins}) SELECT {sel} FROM {src} {where} ON DUPLICATE KEY UPDATE {sets}"
            else:
                raise ConfigurationError(f"upsertKeys is not supported on {self._dialect_name}")
        conn.execute(sa.text(sql).bindparams(sa.bindparam("ids", expanding=True)), {"ids": ids})
        self._delete_staged(conn, ids)

    def _delete_staged(self, conn: Connection, ids: Sequence[str]) -> None:
        if not ids:
            return
        conn.execute(sa.text(f"DELETE FROM {self.stage.quoted(conn.dialect)} WHERE {self._q(_TXN_COL)} IN :ids")
                     .bindparams(sa.bindparam("ids", expanding=True)), {"ids": list(ids)})

    def abort(self, handle: StagingHandle) -> None:
        """Delete an attempt's staged rows. Idempotent.

        Raises:
            ProtocolError: the handle is not a staging handle.
            SinkError / SinkUnavailableError: the database failed; retry.
        """
        txn_id = self._checked(handle)
        conn = self._connect()
        try:
            self._begin(conn)
            if self._has_table(conn, self.stage):
                self._delete_staged(conn, [txn_id])
            conn.commit()
        except SQLAlchemyError as exc:
            _quiet_rollback(conn)
            raise self._error(exc, f"delete staged rows of {txn_id}") from None
        finally:
            conn.close()

    def _staged_txns(self, conn: Connection, prefix: str, *, prefix_only: bool = False) -> list[str]:
        if not self._has_table(conn, self.stage):
            return []
        col = self._q(_TXN_COL)
        like = f"{TXN_PREFIX}:{prefix}%" if prefix_only else f"{TXN_PREFIX}:{prefix}:%"
        rows = conn.execute(sa.text(f"SELECT DISTINCT {col} FROM {self.stage.quoted(conn.dialect)} "
                                    f"WHERE {col} LIKE :p"), {"p": like}).all()
        return [r[0] for r in rows]

    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> list[StagingHandle]:
        """Attempts of *sink_id* (and *batch_id*) with rows in the staging table."""
        conn = self._connect()
        try:
            with _fresh(conn):
                txns = self._staged_txns(conn, sink_id)
        except SQLAlchemyError as exc:
            raise self._error(exc, "list staged transactions") from None
        finally:
            conn.close()
        out = []
        for txn_id in txns:
            h = self.parse_txn_id(txn_id)
            if h is not None and h.sink_id == sink_id and (batch_id is None or h.batch_id == batch_id):
                out.append(h)
        return sorted(out, key=lambda h: (h.batch_id, h.txn_id))

    def parse_txn_id(self, txn_id: str) -> StagingHandle | None:
        m = _TXN_RE.match(txn_id)
        if m is None:
            return None
        return StagingHandle(txn_id, m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)),
                             table=self.target.display(), stage_table=self.stage.display(), rows=-1)

    def purge_committed(self, sink_id: str, below_batch: int) -> None:
        """Delete batch markers of *sink_id* below *below_batch* (best effort)."""
        conn = self._connect()
        try:
            with _fresh(conn):
                conn.execute(sa.text(f"DELETE FROM {self.batches.quoted(conn.dialect)} "
                                     f"WHERE sink_id = :s AND batch_id < :b"), {"s": sink_id, "b": below_batch})
        except SQLAlchemyError as exc:
            log.warning("twopc staging: could not purge batch markers: %s", self._redact(str(exc))[:200])
        finally:
            conn.close()


def _sql_string(text: str, *, backslash: bool) -> str:
    """A SQL string literal (for DDL that takes no bind parameters)."""
    if "\x00" in text:
        raise ConfigurationError("tableComment must not contain NUL bytes")
    body = text.replace("\\", "\\\\") if backslash else text
    return "'" + body.replace("'", "''") + "'"


def _fresh(conn: Connection) -> Any:
    """``conn.begin()`` after ending a transaction that reflection queries auto-began."""
    if conn.in_transaction():
        conn.commit()
    return conn.begin()


def _quiet_rollback(conn: Connection) -> None:
    try:
        conn.rollback()
    except Exception:  # noqa: BLE001
        pass


def _is_disconnect(exc: DBAPIError) -> bool:
    return bool(getattr(exc, "connection_invalidated", False))


def _check_nul(name: str, arr: pa.Array) -> None:
    import pyarrow.compute as pc

    if pc.any(pc.match_substring(arr, "\x00")).as_py():
        raise ConfigurationError(
            f"column {name!r}: a value contains a NUL byte (\\x00), which the database cannot store "
            f"in text; remove it before writing. Nothing was written")


def _type_fits(arrow: pa.DataType, sqltype: Any) -> bool:
    """Loose category check between a DataFrame type and a reflected column type."""
    try:
        py = sqltype.python_type
    except (NotImplementedError, AttributeError):
        return True
    if pa.types.is_integer(arrow):
        return py in (int, float, __import__("decimal").Decimal, bool)
    if pa.types.is_floating(arrow) or pa.types.is_decimal(arrow):
        return py in (float, __import__("decimal").Decimal, int)
    if pa.types.is_boolean(arrow):
        return py in (bool, int)
    if pa.types.is_string(arrow) or pa.types.is_large_string(arrow):
        return py is str
    if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow):
        return py is bytes
    if pa.types.is_timestamp(arrow):
        return py in (dt.datetime, str)
    if pa.types.is_date(arrow):
        return py in (dt.date, dt.datetime, str)
    return True
