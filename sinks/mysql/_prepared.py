"""MariaDB/MySQL's SQL for the prepared-transaction protocol on XA transactions. A prepared xid
stays attached to its session while that is connected (others get ``XAER_NOTA``), so ``prepare``
closes the writing connection (never pooled) and waits until the server ended the session; ``XA
RECOVER`` lists the xid in both states, which is how ``finish`` tells "attached" (retry) from "gone"."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pymysql
from sqlalchemy.exc import DBAPIError

from twopc import ConfigurationError, SinkError
from twopc.spi import TargetConfigurationError

from ..sql._prepared_committer import MarkerTable
from ..sql._sql_dialect import SqlTxn, TxnControl
from ..sql._sql_target import SqlTarget, give_back
from ..sql.options import isolation_sql
from . import _server as server
from ._dialect import MySqlDialect
from ._errors import (
    ACCESS_DENIED,
    ER_BAD_DB,
    ER_XAER_NOTA,
    XA_ROLLED_BACK,
    errno,
    is_connection_error,
)
from ._my_column import MyColumn
from ._server import exec_sql
from ._xa_commit import commit_many

if TYPE_CHECKING:
    import pyarrow as pa
    from pymysql.connections import Connection as PyMySQLConnection

    from twopc.spi import Headroom

__all__ = ["MySqlPrepared"]

log = logging.getLogger("twopc.sinks.mysql")

#: how long prepare waits for the closed session to end, and commit/abort retry an attached xid
_DETACH_WAIT_S = 10.0
#: servers (``host:port/db as user``) whose account cannot read INNODB_TRX, in this process
_INNODB_TRX_UNREADABLE: set[str] = set()


class MySqlPrepared(MySqlDialect):
    """XA's part of a prepared-transaction sink, on *target*'s connections (ConfigurationError:
    the table names no database and the URL has none)."""

    def __init__(self, target: SqlTarget) -> None:
        if target.table.schema is None and not target.options.url.database:
            raise ConfigurationError(
                f"table {target.options.table!r} names no database and the url has none: write database.table or "
                f"add the database to the url (mysql+pymysql://host:port/database)")
        self.target = target
        self.markers = MarkerTable(target)

    def xa_available(self) -> tuple[bool, str]:
        """Whether the server can run the XA protocol; never raises (see ``MySqlXaSink.probe_xa``)."""
        t = self.target
        try:
            conn = t.engine().raw_connection()
        except (pymysql.Error, DBAPIError, OSError) as exc:
            return False, str(t.unavailable(exc))
        broken = False
        try:
            with conn.driver_connection.cursor() as cur:  # type: ignore[union-attr]  # a checked-out connection has its DB-API connection
                return server.probe_xa(cur, t.where(), t.redact)
        except pymysql.Error as exc:
            broken = is_connection_error(exc)
            return False, f"probing XA at {t.where()} failed: {t.redact(t.database.error_text(exc))}"
        finally:
            give_back(conn, broken=broken)

    def check_server(self, my: PyMySQLConnection) -> None:
        with my.cursor() as cur:
            ok, reason = server.probe_xa(cur, self.target.where(), self.target.redact)
        if not ok:
            raise TargetConfigurationError(f"twopc cannot write exactly once through XA: {reason}")

    def table_columns(self, my: PyMySQLConnection, *, validating: bool) -> list[MyColumn]:
        t = self.target
        with my.cursor() as cur:
            if (info := server.table_info(cur, t.table)) is None:
                similar = server.similar_tables(cur, t.table) if validating else []
                raise t.no_such_table(similar, validating=validating, database=t.table.schema or t.options.url.database,
                                      case_hint="Table names are case-sensitive here.", table_options=" ENGINE=InnoDB")
            if validating and (problem := server.engine_problem(cur, info, t.table_label, xa=True)):
                raise TargetConfigurationError(problem)
            return server.table_columns(cur, info)

    def marker_table_ddl(self) -> str:
        """The SQL :meth:`validate` runs to create the marker table (for DBAs)."""
        return self._marker_ddl().replace("%%", "%")

    def _marker_ddl(self) -> str:
        return (
            f"CREATE TABLE IF NOT EXISTS {self.target.qualified(self.target.marker)} ("
            "`gid` VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY, "
            "`sink_id` VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, "
            "`batch_id` BIGINT NOT NULL, `partition_id` INT NOT NULL, `rows` BIGINT NOT NULL, "
            "`prepared_at` TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
            "KEY `twopc_sink_batch` (`sink_id`, `batch_id`)) ENGINE=InnoDB"
        )

    def marker_columns(self, my: PyMySQLConnection) -> list[str] | None:
        with my.cursor() as cur:
            if (info := server.table_info(cur, self.target.marker)) is None:
                return None
            if problem := server.engine_problem(cur, info, self.target.marker_label, role="the marker table", xa=True):
                raise TargetConfigurationError(problem)
            return [c.name for c in server.table_columns(cur, info)]

    def create_markers(self, my: PyMySQLConnection) -> None:
        try:
            with my.cursor() as cur:
                exec_sql(cur, self._marker_ddl())
        except pymysql.err.MySQLError as exc:
            if (code := errno(exc)) in ACCESS_DENIED:
                raise TargetConfigurationError(
                    f"cannot create the marker table {self.target.marker_label}: permission denied. Create it once "
                    f"as an owner: {self.marker_table_ddl()}; GRANT SELECT, INSERT, DELETE ON "
                    f"{self.target.marker_label} TO <user>") from None
            if code == ER_BAD_DB:
                raise TargetConfigurationError(
                    f"cannot create the marker table {self.target.marker_label}: its database does not exist. "
                    f"Set option markerTable to a table in an existing database") from None
            raise

    def ensure_own_tables(self, my: PyMySQLConnection) -> None:
        """None: XA keeps no tables besides the marker table."""

    def begin(self, txn: SqlTxn[MyColumn]) -> None:
        """``sessionInitStatement`` once per connection, the session settings and isolation level,
        the table's columns, then ``XA START``."""
        assert txn.conn is not None
        my: PyMySQLConnection = txn.conn.driver_connection  # type: ignore[assignment]  # PyMySQL: the engine's driver
        o = self.target.options
        with my.cursor() as cur:
            if o.session_init_statement is not None:
                done: set[str] = txn.conn.info.setdefault("twopc_session_init", set())
                if o.session_init_statement not in done:
                    exec_sql(cur, o.session_init_statement.replace("%", "%%"))
                    while cur.nextset():
                        pass
                    done.add(o.session_init_statement)
            for stmt, params in server.session_settings(o.lock_timeout, o.query_timeout):
                exec_sql(cur, stmt, params)
            exec_sql(cur, "SELECT CONNECTION_ID()")
            row = cur.fetchone()
            txn.session_id = int(row[0]) if row else 0
        txn.columns = self.table_columns(my, validating=False)
        with my.cursor() as cur:
            exec_sql(cur, f"SET TRANSACTION ISOLATION LEVEL {isolation_sql(o.isolation_level)}")
            exec_sql(cur, "XA START %s", (txn.gid,))
        txn.state = "active"

    def _insert_sql(self, cols: list[MyColumn]) -> str:
        t = self.target
        names = ", ".join(t.quote(c.name) for c in cols)
        return f"INSERT INTO {t.qualified(t.table)} ({names}) VALUES ({', '.join(['%s'] * len(cols))})"

    def _insert(self, txn: SqlTxn[MyColumn], query: str, rows: list[tuple[Any, ...]]) -> None:
        assert txn.conn is not None
        with txn.conn.driver_connection.cursor() as cur:  # type: ignore[union-attr]  # a checked-out connection has its DB-API connection
            for i in range(0, len(rows), self.target.options.batch_size):
                cur.executemany(query, rows[i:i + self.target.options.batch_size])

    def load_rows(self, txn: SqlTxn[MyColumn], cols: list[MyColumn], keys: tuple[str, ...],
                   rows: list[dict[str, Any]]) -> None:
        from ._values import check_value  # here: a worker that only commits loads no pyarrow
        values = [tuple(check_value(r[k], k, i, self.target.table_label) for k in keys) for i, r in enumerate(rows)]
        self._insert(txn, self._insert_sql(cols), values)

    def plan(self, schema: pa.Schema, cols: list[MyColumn]) -> str:
        return self._insert_sql(cols)

    def load_batch(self, txn: SqlTxn[MyColumn], batch: pa.RecordBatch, plan: str) -> None:
        from ._values import checked_array
        arrays = [checked_array(arr, name, self.target.table_label)
                  for name, arr in zip(batch.schema.names, batch.columns, strict=True)]
        size = self.target.options.batch_size
        for start in range(0, batch.num_rows, size):
            self._insert(txn, plan, list(zip(*(a.slice(start, size).to_pylist() for a in arrays), strict=True)))

    def end_load(self, txn: SqlTxn[MyColumn]) -> None:
        """Nothing: every row is inserted when it is loaded."""

    def prepare(self, txn: SqlTxn[MyColumn], control: TxnControl[MyColumn]) -> None:
        """Marker row, ``XA END``, ``XA PREPARE``, check ``XA RECOVER`` lists it, then close the connection
        and wait until the server ended that session (only then can another session commit the xid)."""
        my: PyMySQLConnection = control.usable(txn)
        marker_sql, marker_values = control.marker_row(txn)
        prepare_sent = False
        try:
            with my.cursor() as cur:
                exec_sql(cur, marker_sql, marker_values)
                exec_sql(cur, "XA END %s", (txn.gid,))
                txn.state = "idle"
                prepare_sent = True
                exec_sql(cur, "XA PREPARE %s", (txn.gid,))
                txn.state = "prepared"
                exec_sql(cur, "XA RECOVER")
                prepared = txn.gid in server.parse_recover(cur.fetchall())
        except pymysql.Error as exc:
            if prepare_sent and is_connection_error(exc):
                control.release(txn, broken=True)
                self._rollback_prepared_quietly(txn)
            control.fail(txn, exc, f"prepare the XA transaction on {self.target.table_label}")
        except BaseException as exc:
            if txn.state == "prepared":
                txn.prepared = True  # nothing else may touch the session: close it, sweep the orphan
                control.release(txn, broken=True)
                self._rollback_prepared_quietly(txn)
            else:
                control.abandon(txn, exc)
            raise
        if not prepared:
            control.abandon(txn, SinkError("XA RECOVER does not list the transaction"))
            raise SinkError(
                f"MariaDB/MySQL acknowledged XA PREPARE of {txn.gid} on {self.target.table_label} but XA RECOVER "
                f"does not list it: nothing was written; the task must be retried")
        txn.prepared = True
        control.release(txn, broken=True)  # close: a prepared xid is committable only once its session ended
        self._wait_detached(txn)

    def _wait_detached(self, txn: SqlTxn[MyColumn]) -> None:
        """Wait (bounded, best effort) until the closed write session ended and InnoDB detached its prepared
        transaction. MariaDB lets others commit the xid (and drops the session from ``PROCESSLIST``) before InnoDB
        detaches it; an ``XA COMMIT`` in between answers OK, commits nothing and forgets the xid until a restart.
        Only ``INNODB_TRX`` (``PROCESS`` privilege) shows the second step; without it this waits for the first
        only, and commit checks the marker (:meth:`finish`)."""
        if not txn.session_id:
            return
        deadline = time.monotonic() + _DETACH_WAIT_S
        watch = [("SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = %s", False),
                 ("SELECT 1 FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = %s", True)]
        try:
            for query, needs_process in watch:
                if needs_process and self.target.where() in _INNODB_TRX_UNREADABLE:
                    return
                delay = 0.002
                while True:
                    try:
                        _n, rows = self.target.control_execute(query, (txn.session_id,), fetch=True)
                    except pymysql.err.MySQLError as exc:
                        if not needs_process or errno(exc) not in ACCESS_DENIED:
                            raise
                        _INNODB_TRX_UNREADABLE.add(self.target.where())
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

    def rollback(self, txn: SqlTxn[MyColumn]) -> bool:
        """``XA END`` + ``XA ROLLBACK``; ``True`` (close the connection: the server rolls back) when
        that failed or left the xid behind."""
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
        return broken or txn.state != "none"

    @staticmethod
    def _xa_quietly(cur: Any, verb: str, gid: str, fine: frozenset[int] | set[int]) -> None:
        """``XA <verb>``, accepting the errors in *fine* (the transaction is already gone)."""
        try:
            exec_sql(cur, f"XA {verb} %s", (gid,))
        except pymysql.err.MySQLError as exc:
            if is_connection_error(exc) or errno(exc) not in fine:
                raise

    def _rollback_prepared_quietly(self, txn: SqlTxn[MyColumn]) -> None:
        """After the connection broke around ``XA PREPARE``: ``KILL`` its session (the xid is attached
        until it ends) and roll the xid back. Best effort: recovery's sweep rolls back what remains."""
        try:
            if txn.session_id:
                with contextlib.suppress(pymysql.err.MySQLError):  # unknown thread: already gone
                    self.target.control_execute(f"KILL CONNECTION {int(txn.session_id)}")
                self._wait_detached(txn)
            self.target.control_execute("XA ROLLBACK %s", (txn.gid,))
        except Exception:
            log.debug("twopc mysql xa: could not roll back %s after a failed prepare", txn.gid, exc_info=True)

    def headroom(self) -> Headroom:
        from twopc.spi import Headroom  # twopc status's: a write's workers never build one
        _n, rows = self.target.control_execute("XA RECOVER", fetch=True)
        return Headroom("XA RECOVER", len(rows), None)

    def swallowed_commit(self, gid: str) -> SinkError:
        """The error for an ``XA COMMIT`` that answered OK without its marker row: it raced the end of
        the preparing session (see :meth:`_wait_detached`)."""
        table = self.target.table_label
        log.error("twopc: MariaDB acknowledged XA COMMIT of %s on %s but did not commit it", gid, table)
        return SinkError(
            f"MariaDB/MySQL acknowledged XA COMMIT of {gid} on {table} but did not commit it (its marker row "
            f"is absent): the commit raced the end of the session that prepared it, a server bug in which XA "
            f"COMMIT answers OK, commits nothing and forgets the xid. The transaction stays prepared inside InnoDB, "
            f"holding its row locks, until the server restarts; XA RECOVER lists it again after the restart. "
            f"Restart the server, then restart the query (or run `twopc recover <checkpointLocation>`) to commit "
            f"it. Granting the sink's account the PROCESS privilege lets twopc wait out that window")

    def prepared_ids(self, prefix: str) -> list[str]:
        _n, rows = self.target.control_execute("XA RECOVER", fetch=True)
        return [g for g in server.parse_recover(rows) if g.startswith(prefix)]

    def finish(self, verb: str, gid: str) -> bool:
        """``XA COMMIT``/``XA ROLLBACK`` *gid*; ``False`` if the server does not know it (``XAER_NOTA``
        and not in ``XA RECOVER``). One listed but unknown to ``XA COMMIT`` is attached to a live
        session: retried for a while, then a :class:`SinkError`."""
        deadline = time.monotonic() + _DETACH_WAIT_S
        delay = 0.01
        while True:
            try:
                self.target.control_execute(f"XA {verb} %s", (gid,))
                if verb == "COMMIT" and not self.markers.exists(gid):
                    raise self.swallowed_commit(gid)
                return True
            except pymysql.err.MySQLError as exc:
                if errno(exc) != ER_XAER_NOTA:
                    raise self.target.map_error(exc, f"XA {verb} {gid}") from None
            if gid not in self.prepared_ids(gid):
                return False
            if time.monotonic() > deadline:
                raise SinkError(
                    f"XA {verb} {gid}: the transaction is prepared but still attached to a live session (the task's "
                    "connection has not ended); nothing changed, retry later or end that connection (KILL it)")
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def finish_many(self, verb: str, gids: Sequence[str], *, recovering: bool) -> list[bool]:
        """A batch's ``XA COMMIT``\\ s in one round trip (:func:`~twopc.sinks.mysql._xa_commit.commit_many`);
        otherwise :meth:`finish` per id."""
        if verb == "COMMIT" and len(gids) > 1:
            return commit_many(self, gids)
        return [self.finish(verb, gid) for gid in gids]

    def prepared_elsewhere(self, gid: str) -> str | None:
        """``None``: ``XA RECOVER`` is server-wide."""
        return None

    def prepared_since(self, prefix: str) -> dict[str, float]:
        """Empty: ``XA RECOVER`` does not say when a transaction was prepared."""
        return {}
