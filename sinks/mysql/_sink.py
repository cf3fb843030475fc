"""MariaDB / MySQL two-phase-commit sink on XA transactions: each task attempt inserts its rows, writes a marker row
and ``XA PREPARE``\\ s it under a gtrid that is a :class:`twopc.Xid` (bqual empty, formatID 1, at most 64 bytes); the
driver runs ``XA COMMIT`` from another connection. XA's SQL is :class:`~twopc.sinks.mysql._prepared.MySqlPrepared`'s.
``XA RECOVER`` is server-wide: the sink id must be unique per server (the default, from the checkpoint location, is).

The server needs an InnoDB table, ``INSERT`` on it, ``CREATE`` on its database the first time (or
:meth:`MySqlPrepared.marker_table_ddl`), and on MySQL 8 ``XA_RECOVER_ADMIN``."""

from __future__ import annotations

from sqlalchemy.engine import URL

from twopc import ConfigurationError

from .._handles import MySqlXaHandle
from ..sql._prepared_sink import PreparedSqlSink
from ._my_column import MyColumn
from ._prepared import MySqlPrepared

__all__ = ["MySqlXaHandle", "MySqlXaSink"]


class MySqlXaSink(PreparedSqlSink[MyColumn, MySqlXaHandle]):
    """Exactly-once appends to one MariaDB/MySQL InnoDB table through XA transactions.

    Args:
        url: a ``jdbc:mysql://`` / ``jdbc:mariadb://`` or SQLAlchemy URL, text or :class:`sqlalchemy.engine.URL`
            (the driver becomes PyMySQL).
        table: ``[database.]table`` in MySQL syntax (backticks); without a database, the URL's.
        **options: ``twopc-jdbc``'s options as keywords, e.g. ``lock_timeout`` (whole seconds, at least 1),
            ``session_init_statement`` (run once on every new write connection).

    Raises:
        ConfigurationError: an argument is invalid (nothing is contacted)."""

    __handle_type__ = MySqlXaHandle
    database = MySqlPrepared
    dialect_type = MySqlPrepared
    dialect: MySqlPrepared

    @classmethod
    def probe_xa(cls, url: str | URL, *, connect_timeout: int = 10) -> tuple[bool, str]:
        """Whether the server at *url* can run the XA protocol (version, InnoDB with XA, ``XA
        RECOVER`` allowed); ``twopc-jdbc`` picks its mode by it. Never raises.

        Returns:
            ``(True, description)`` or ``(False, reason)``; neither contains the password."""
        try:
            probe = cls(url, "information_schema.twopc_probe", connect_timeout=connect_timeout)
        except ConfigurationError as exc:
            return False, str(exc)
        return probe.dialect.xa_available()
