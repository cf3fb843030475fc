"""MariaDB / MySQL two-phase-commit sink built on XA transactions.

Each Spark task attempt opens one XA transaction on its own connection, inserts its rows
with multi-row ``INSERT ... VALUES (...), (...)`` statements, writes a marker row, and
``XA PREPARE``\\ s it under an xid whose gtrid is a :class:`twopc.Xid` naming the sink,
batch, partition and attempt (bqual empty, formatID 1; MariaDB and MySQL limit a gtrid to
64 bytes). The driver then runs ``XA COMMIT`` (or ``XA ROLLBACK``) from another connection.
A repeated ``XA COMMIT`` answers ``XAER_NOTA`` exactly like a rolled-back xid does, so the
marker row (committed atomically with the data) tells "already committed" from "lost". The
protocol itself lives in :class:`~twopc.sinks.sql.PreparedSqlSink`; this module is XA's part.

While the session that prepared an xid is still connected, the transaction stays attached
to it: no other session can commit it (``XA COMMIT`` answers ``XAER_NOTA``) and the
session itself can start nothing new (``XAER_RMFAIL``). So ``pre_commit`` closes the writing
connection and waits until the server has ended the session; it is never put back into a
pool. ``XA RECOVER`` lists the xid in both states, which is how ``commit`` tells "attached
to a live session" (retry) from "gone". ``XA RECOVER`` is server-wide (not per database):
the sink id must be unique per server, which the default id derived from the checkpoint
location is.

Requirements on the server: InnoDB target table (other engines cannot take part in XA),
``INSERT`` on it, ``CREATE`` on its database the first time (for the marker table; or
create it yourself: :meth:`MySqlXaSink.marker_table_ddl`), and, on MySQL 8,
``XA_RECOVER_ADMIN`` to see other sessions' prepared transactions. Session settings:
:func:`twopc.sinks.mysql._server.session_settings`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pymysql
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from twopc import ConfigurationError, SinkError
from twopc.spi import Headroom, TargetConfigurationError

from .._handles import MySqlXaHandle
from ..sql.connect._sql_dialect import SqlTxn, give_back
from ..sql.options._jdbc_options import JdbcOptions
from ..sql.prepared._sink import PreparedSqlSink
from . import _server as server
from ._errors import (
    ACCESS_DENIED,
    ER_BAD_DB,
    ER_XAER_NOTA,
    XA_ROLLED_BACK,
    errno,
    is_connection_error,
)
from ._server import exec_sql
from ._spec import MYSQL, lock_seconds
from ._values import MyColumn, check_array, check_value, normalize_array

if TYPE_CHECKING:
    from pymysql.connections import Connection as PyMySQLConnection

__all__ = ["MySqlXaHandle", "MySqlXaSink"]

log = logging.getLogger("twopc.sinks.mysql")

#: how long pre_commit waits for the server to end the writing session after closing it,
#: and commit/abort retry an xid still attached to a live session
_DETACH_WAIT_S = 10.0
#: servers (``host:port/db as user``) whose account cannot read INNODB_TRX, in this process
_INNODB_TRX_UNREADABLE: set[str] = set()


class MySqlXaSink(PreparedSqlSink[MyColumn, MySqlXaHandle]):
    """Exactly-once appends to one MariaDB/MySQL InnoDB table through XA transactions.

    Args:
        url: a ``jdbc:mysql://`` / ``jdbc:mariadb://`` URL, or a SQLAlchemy URL
            (``mysql://``, ``mysql+pymysql://``, ``mariadb://``...; the driver is replaced
            by PyMySQL), as text or :class:`sqlalchemy.engine.URL`.
        table: ``[database.]table`` in MySQL syntax; quote names with backticks. Without a
            database, the URL's database is used.
        **options: ``user``, ``password``, ``marker_table``, ``batch_size`` (rows per
            multi-row ``INSERT``), ``lock_timeout`` (``innodb_lock_wait_timeout`` of write
            transactions, whole seconds, at least 1), ``connect_timeout``,
            ``isolation_level``, ``query_timeout`` (MariaDB ``max_statement_time``),
            ``session_init_statement`` (run once on every new write connection, before its
            first ``XA START``).

    Raises:
        ConfigurationError: an argument is invalid (nothing is contacted).
    """

    handle_type = MySqlXaHandle
    spec = MYSQL

    def _configure(self, options: JdbcOptions) -> None:
        super()._configure(options)
        if self._target.schema is None and not options.url.database:
            raise ConfigurationError(
                f"table {options.table!r} names no database and the url has none: write database.table or "
                f"add the database to the url (mysql+pymysql://host:port/database)")

    # -- XA availability -------------------------------------------------------------------
    @classmethod
    def probe_xa(cls, url: str | URL, *, connect_timeout: int = 10) -> tuple[bool, str]:
        """Tell whether the server at *url* can run this sink's XA protocol (version,
        InnoDB with XA, ``XA RECOVER`` allowed). Never raises: ``twopc-jdbc`` uses the
        answer to pick the prepared (XA) or the staging mode.

        Returns:
            ``(True, description)`` or ``(False, reason)``; neither contains the password.
        """
        try:
            probe = cls(url, "information_schema.twopc_probe", connect_timeout=connect_timeout)
        except ConfigurationError as exc:
            return False, str(exc)
        return probe.xa_available()

    def xa_available(self) -> tuple[bool, str]:
        """:meth:`probe_xa` for this sink's server."""
        try:
            conn = self._engine().raw_connection()
        except (pymysql.Error, DBAPIError, OSError) as exc:
            return False, str(self._unavailable(exc))
        broken = False
        try:
            with conn.driver_connection.cursor() as cur:  # type: ignore[union-attr]  # a checked-out connection has its DB-API connection
                return server.probe_xa(cur, self._where(), self._redact)
        except pymysql.Error as exc:
            broken = is_connection_error(exc)
            return False, f"probing XA at {self._where()} failed: {self._redact(self._error_text(exc))}"
        finally:
            give_back(conn, broken=broken)

    # -- validation (driver) -------------------------------------------------------------
    def _check_server(self, my: PyMySQLConnection) -> None:
        with my.cursor() as cur:
            ok, reason = server.probe_xa(cur, self._where(), self._redact)
        if not ok:
            raise TargetConfigurationError(f"twopc cannot write exactly once through XA: {reason}")

    def _target_columns(self, my: PyMySQLConnection, *, validating: bool) -> list[MyColumn]:
        with my.cursor() as cur:
            info = server.table_info(cur, self._target)
            if info is None:
                similar = server.similar_tables(cur, self._target) if validating else []
                raise self._no_such_table(similar, validating=validating,
                                          database=self._target.schema or self.options.url.database,
                                          case_hint="Table names are case-sensitive here.",
                                          table_options=" ENGINE=InnoDB")
            if validating and (problem := server.engine_problem(cur, info, self.table, xa=True)):
                raise TargetConfigurationError(problem)
            return server.table_columns(cur, info)

    def marker_table_ddl(self) -> str:
        """The SQL :meth:`validate` runs to create the marker table (for DBAs)."""
        return self._marker_ddl().replace("%%", "%")

    def _marker_ddl(self) -> str:
        return (
            f"CREATE TABLE IF NOT EXISTS {self._qualified(self._marker)} ("
            "`gid` VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY, "
            "`sink_id` VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, "
            "`batch_id` BIGINT NOT NULL, `partition_id` INT NOT NULL, `rows` BIGINT NOT NULL, "
            "`prepared_at` TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
            "KEY `twopc_sink_batch` (`sink_id`, `batch_id`)) ENGINE=InnoDB"
        )

    def _marker_columns(self, my: PyMySQLConnection) -> list[str] | None:
        with my.cursor() as cur:
            info = server.table_info(cur, self._marker)
            if info is None:
                return None
            if problem := server.engine_problem(cur, info, self.marker_table, role="the marker table", xa=True):
                raise TargetConfigurationError(problem)
            return [c.name for c in server.table_columns(cur, info)]

    def _create_markers(self, my: PyMySQLConnection) -> None:
        try:
            with my.cursor() as cur:
                exec_sql(cur, self._marker_ddl())
        except pymysql.err.MySQLError as exc:
            code = errno(exc)
            if code in ACCESS_DENIED:
                raise TargetConfigurationError(
                    f"cannot create the marker table {self.marker_table}: permission denied. Create it once "
                    f"as an owner: {self.marker_table_ddl()}; GRANT SELECT, INSERT, DELETE ON "
                    f"{self.marker_table} TO <user>") from None
            if code == ER_BAD_DB:
                raise TargetConfigurationError(
                    f"cannot create the marker table {self.marker_table}: its database does not exist. "
                    f"Set option markerTable to a table in an existing database") from None
            raise

    # -- executor side -------------------------------------------------------------------
    def _begin(self, txn: SqlTxn[MyColumn]) -> None:
        """Run ``sessionInitStatement`` once per connection, the session settings and the
        isolation level, read the table's columns, then ``XA START``."""
        my: PyMySQLConnection = self._usable(txn)
        o = self.options
        assert txn.conn is not None
        with my.cursor() as cur:
            if o.session_init_statement is not None:
                done: set[str] = txn.conn.info.setdefault("twopc_session_init", set())
                if o.session_init_statement not in done:
                    exec_sql(cur, o.session_init_statement.replace("%", "%%"))
                    while cur.nextset():
                        pass
                    done.add(o.session_init_statement)
            for stmt, params in server.session_settings(lock_seconds(o.lock_timeout), o.query_timeout.seconds):
                exec_sql(cur, stmt, params)
            exec_sql(cur, "SELECT CONNECTION_ID()")
            row = cur.fetchone()
            txn.session_id = int(row[0]) if row else 0
        txn.columns = self._target_columns(my, validating=False)
        with my.cursor() as cur:
            exec_sql(cur, f"SET TRANSACTION ISOLATION LEVEL {o.isolation_sql}")
            exec_sql(cur, "XA START %s", (txn.gid,))
        txn.state = "active"

    def _insert_sql(self, cols: list[MyColumn]) -> str:
        names = ", ".join(self._quote(c.name) for c in cols)
        return f"INSERT INTO {self._qualified(self._target)} ({names}) VALUES ({', '.join(['%s'] * len(cols))})"

    def _insert(self, txn: SqlTxn[MyColumn], query: str, rows: list[tuple[Any, ...]]) -> None:
        assert txn.conn is not None
        with txn.conn.driver_connection.cursor() as cur:  # type: ignore[union-attr]  # a checked-out connection has its DB-API connection
            for i in range(0, len(rows), self.options.batch_size):
                cur.executemany(query, rows[i:i + self.options.batch_size])

    def _load_rows(self, txn: SqlTxn[MyColumn], cols: list[MyColumn], keys: tuple[str, ...],
                   rows: list[dict[str, Any]]) -> None:
        values = [tuple(check_value(r[k], k, i, self.table) for k in keys) for i, r in enumerate(rows)]
        self._insert(txn, self._insert_sql(cols), values)

    def _plan(self, schema: pa.Schema, cols: list[MyColumn]) -> str:
        return self._insert_sql(cols)

    def _load_batch(self, txn: SqlTxn[MyColumn], batch: pa.RecordBatch, plan: str) -> None:
        arrays = []
        for name, arr in zip(batch.schema.names, batch.columns, strict=True):
            arr = normalize_array(arr)
            check_array(arr, name, self.table)
            arrays.append(arr)
        size = self.options.batch_size
        for start in range(0, batch.num_rows, size):
            chunk = [a.slice(start, size).to_pylist() for a in arrays]
            self._insert(txn, plan, list(zip(*chunk, strict=True)))

    def _prepare(self, txn: SqlTxn[MyColumn]) -> None:
        """Marker row, ``XA END``, ``XA PREPARE``, check with ``XA RECOVER`` that the
        server really prepared it, then close the connection and wait until the server has
        ended that session (only then can another session commit the xid)."""
        my: PyMySQLConnection = self._usable(txn)
        prepare_sent = False
        try:
            with my.cursor() as cur:
                exec_sql(cur, self._marker_insert(), self._marker_values(txn))
                exec_sql(cur, "XA END %s", (txn.gid,))
                txn.state = "idle"
                prepare_sent = True
                exec_sql(cur, "XA PREPARE %s", (txn.gid,))
                txn.state = "prepared"
                exec_sql(cur, "XA RECOVER")
                prepared = txn.gid in server.parse_recover(cur.fetchall())
        except pymysql.Error as exc:
            if prepare_sent and is_connection_error(exc):
                self._release(txn, broken=True)
                self._rollback_prepared_quietly(txn)
            self._fail(txn, exc, f"prepare the XA transaction on {self.table}")
        except BaseException as exc:
            if txn.state == "prepared":
                txn.prepared = True  # nothing else may touch the session: close it, sweep the orphan
                self._release(txn, broken=True)
                self._rollback_prepared_quietly(txn)
            else:
                self._abandon(txn, exc)
            raise
        if not prepared:
            self._abandon(txn, SinkError("XA RECOVER does not list the transaction"))
            raise SinkError(
                f"MariaDB/MySQL acknowledged XA PREPARE of {txn.gid} on {self.table} but XA RECOVER does not "
                f"list it: nothing was written; the task must be retried")
        txn.prepared = True
        self._release(txn, broken=True)  # close: a prepared xid is committable only once its session ended
        self._wait_detached(txn)

    def _wait_detached(self, txn: SqlTxn[MyColumn]) -> None:
        """Wait (bounded) until the server has ended the closed write session and InnoDB
        has detached its prepared transaction, so that the returned handle is safely
        committable at once. Best effort: commit retries an attached xid, and checks that a
        commit it was told succeeded did happen (see :meth:`_finish`).

        MariaDB ends a session in two steps: the xid becomes committable by other sessions
        (and the session leaves ``PROCESSLIST``) before InnoDB detaches the transaction
        from it. An ``XA COMMIT`` in between answers OK, commits nothing and forgets the
        xid, leaving the transaction prepared inside InnoDB until the server restarts. Only
        ``information_schema.INNODB_TRX`` shows the second step (it needs the ``PROCESS``
        privilege); without it this waits for the first step only."""
        if not txn.session_id:
            return
        deadline = time.monotonic() + _DETACH_WAIT_S
        watch = [("SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = %s", False),
                 ("SELECT 1 FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = %s", True)]
        try:
            for query, needs_process in watch:
                if needs_process and self._where() in _INNODB_TRX_UNREADABLE:
                    return
                delay = 0.002
                while True:
                    try:
                        _n, rows = self._control_execute(query, (txn.session_id,), fetch=True)
                    except pymysql.err.MySQLError as exc:
                        if not needs_process or errno(exc) not in ACCESS_DENIED:
                            raise
                        _INNODB_TRX_UNREADABLE.add(self._where())
                        log.warning("twopc mysql xa: the account cannot read information_schema.INNODB_TRX (no "
                                    "PROCESS privilege), so twopc cannot wait until MariaDB has detached a "
                                    "prepared transaction from its ended session; grant it PROCESS (see the "
                                    "README: XA COMMIT in that window answers OK and commits nothing)")
                        return
                    if not rows:
                        break
                    if time.monotonic() > deadline:
                        return
                    time.sleep(delay)
                    delay = min(delay * 2, 0.1)
        except (SinkError, pymysql.Error):
            log.debug("twopc mysql xa: could not watch session %s end", txn.session_id, exc_info=True)

    def rollback(self, txn: SqlTxn[MyColumn]) -> None:
        """Roll back an open, unprepared transaction (``XA END`` + ``XA ROLLBACK``; if that
        fails the connection is closed, which makes the server roll it back). Idempotent;
        never raises."""
        if txn.prepared or txn.conn is None:
            return
        broken = False
        try:
            with txn.conn.driver_connection.cursor() as cur:  # type: ignore[union-attr]  # a checked-out connection has its DB-API connection
                if txn.state == "active":
                    self._xa_quietly(cur, "END", txn.gid, XA_ROLLED_BACK)
                    txn.state = "idle"
                if txn.state in ("idle", "prepared"):
                    self._xa_quietly(cur, "ROLLBACK", txn.gid, XA_ROLLED_BACK | {ER_XAER_NOTA})
                    txn.state = "none"
        except Exception:
            broken = True
            log.debug("twopc mysql xa: rollback of %s failed; closing the connection", txn.gid, exc_info=True)
        txn.failed = txn.failed or "rolled back"
        self._release(txn, broken=broken or txn.state != "none")

    @staticmethod
    def _xa_quietly(cur: Any, verb: str, gid: str, fine: frozenset[int] | set[int]) -> None:
        """``XA <verb>``, accepting the errors in *fine* (the transaction is already gone)."""
        try:
            exec_sql(cur, f"XA {verb} %s", (gid,))
        except pymysql.err.MySQLError as exc:
            if is_connection_error(exc) or errno(exc) not in fine:
                raise

    def _rollback_prepared_quietly(self, txn: SqlTxn[MyColumn]) -> None:
        """After the write connection broke around ``XA PREPARE``: end its server session
        (``KILL``; the server may not have noticed the disconnect yet, and a prepared xid is
        attached to its session until then) and roll the xid back if it was prepared. Best
        effort, never raises: recovery's sweep rolls back whatever remains."""
        try:
            if txn.session_id:
                with contextlib.suppress(pymysql.err.MySQLError):  # unknown thread: already gone
                    self._control_execute(f"KILL CONNECTION {int(txn.session_id)}")
                self._wait_detached(txn)
            self._control_execute("XA ROLLBACK %s", (txn.gid,))
        except Exception:
            log.debug("twopc mysql xa: could not roll back %s after a failed prepare", txn.gid, exc_info=True)

    # -- driver side -----------------------------------------------------------------------
    def _headroom(self) -> Headroom:
        _n, rows = self._control_execute("XA RECOVER", fetch=True)
        return Headroom("XA RECOVER", len(rows), None)

    def _swallowed_commit(self, gid: str) -> SinkError:
        """The error for an ``XA COMMIT`` that answered OK while its marker row (committed
        atomically with the data) is not there: the commit raced the end of the session
        that prepared the xid (see :meth:`_wait_detached`)."""
        log.error("twopc: MariaDB acknowledged XA COMMIT of %s on %s but did not commit it", gid, self.table)
        return SinkError(
            f"MariaDB/MySQL acknowledged XA COMMIT of {gid} on {self.table} but did not commit it (its marker row "
            f"is absent): the commit raced the end of the session that prepared it, a server bug in which XA "
            f"COMMIT answers OK, commits nothing and forgets the xid. The transaction stays prepared inside InnoDB, "
            f"holding its row locks, until the server restarts; XA RECOVER lists it again after the restart. "
            f"Restart the server, then restart the query (or run python -m recovery) to commit it. Granting the "
            f"sink's account the PROCESS privilege lets twopc wait out that window")

    def _prepared_ids(self, prefix: str) -> list[str]:
        _n, rows = self._control_execute("XA RECOVER", fetch=True)
        return [g for g in server.parse_recover(rows) if g.startswith(prefix)]

    def _finish(self, verb: str, gid: str) -> bool:
        """``XA COMMIT``/``XA ROLLBACK`` *gid*; ``False`` if the server does not know the xid
        (``XAER_NOTA`` and not listed by ``XA RECOVER``).

        An xid that ``XA RECOVER`` lists but ``XA COMMIT`` calls unknown is still attached
        to a live session (the one that prepared it has not ended yet): retried for a
        while, then a :class:`SinkError`.
        """
        deadline = time.monotonic() + _DETACH_WAIT_S
        delay = 0.01
        while True:
            try:
                self._control_execute(f"XA {verb} %s", (gid,))
                if verb == "COMMIT" and not self._marker_exists(gid):
                    raise self._swallowed_commit(gid)
                return True
            except pymysql.err.MySQLError as exc:
                if errno(exc) != ER_XAER_NOTA:
                    raise self._map_error(exc, f"XA {verb} {gid}") from None
            if gid not in self._prepared_ids(gid):
                return False
            if time.monotonic() > deadline:
                raise SinkError(
                    f"XA {verb} {gid}: the transaction is prepared but still attached to a live session "
                    f"(the task's connection has not ended); nothing changed, retry later or end that "
                    f"connection (KILL it)")
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
