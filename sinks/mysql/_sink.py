"""MariaDB / MySQL two-phase-commit sink built on XA transactions.

Each Spark task attempt opens one XA transaction on its own connection, inserts its rows
with multi-row ``INSERT ... VALUES (...), (...)`` statements, writes a marker row, and
``XA PREPARE``\\ s it under an xid whose gtrid is a :class:`twopc.Xid` naming the sink,
batch, partition and attempt (bqual empty, formatID 1; MariaDB and MySQL limit a gtrid to
64 bytes). The driver then runs ``XA COMMIT`` (or ``XA ROLLBACK``) from another connection.
A repeated ``XA COMMIT`` answers ``XAER_NOTA`` exactly like a rolled-back xid does, so the
marker row (committed atomically with the data) tells "already committed" from "lost". The
protocol itself lives in :class:`~twopc.sinks.sql.PreparedSqlSink` and its parts; XA's SQL is
:class:`~twopc.sinks.mysql._dialect.MySqlPrepared`.

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
create it yourself: ``sink.dialect.marker_table_ddl()``, :meth:`MySqlPrepared.marker_table_ddl`), and, on MySQL 8,
``XA_RECOVER_ADMIN`` to see other sessions' prepared transactions. Session settings:
:func:`twopc.sinks.mysql._server.session_settings`.
"""

from __future__ import annotations

from sqlalchemy.engine import URL

from twopc import ConfigurationError

from .._handles import MySqlXaHandle
from ..sql.prepared._sink import PreparedSqlSink
from ._my_column import MyColumn
from ._prepared import MySqlPrepared

__all__ = ["MySqlXaHandle", "MySqlXaSink"]


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

    __handle_type__ = MySqlXaHandle
    database = MySqlPrepared
    dialect_type = MySqlPrepared
    dialect: MySqlPrepared

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
        return probe.dialect.xa_available()
