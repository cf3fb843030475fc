"""What a SQL server says it is: the SQL sinks' :meth:`~twopc.spi.NamedTarget.target_instance`.

A checkpoint records the target its batches were prepared in, and a later write must go to
the same one; a URL does not say which server it reaches (``localhost``, an alias, a host
name after a migration). So the server is asked: PostgreSQL's cluster ``system_identifier``
(kept by physical replicas and base backups, which also keep prepared transactions) and the
database's oid; MySQL/MariaDB's host name, port and data folder. A server that cannot answer
gives ``None``: the ledger then compares the URL-based identities.
"""

from __future__ import annotations

import logging

from twopc.spi import NamedTarget, redact

from ._engines import engine_for
from ._registry import dialect_for
from .options import JdbcOptions

__all__ = ["SqlNamedTarget", "server_instance"]

log = logging.getLogger("twopc.sinks.sql")



def server_instance(options: JdbcOptions) -> str | None:
    """``postgresql system <id> database oid <oid> table <table>`` or ``mysql server
    <host>:<port> datadir <folder> table <db.table>``; ``None`` when the server does not
    answer or the dialect has no such query. Never raises."""
    dialect = dialect_for(options.identity_dialect)
    query = dialect.server_identity_sql
    if query is None:
        return None
    try:
        with engine_for(options.url, options.net_timeouts(), autocommit=True).connect() as conn:
            row = conn.exec_driver_sql(query).one()
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot tell": the URLs are compared instead
        log.info("twopc: could not ask %s which server it is (%s): the checkpoint's target is compared by URL",
                 options.safe_url(), redact(str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                                            options.secrets()))
        return None
    return dialect.server_identity(row, options.identity_table())


class SqlNamedTarget(NamedTarget):
    """:class:`~twopc.spi.NamedTarget` of a SQL sink, from its :attr:`options`."""

    options: JdbcOptions

    def target_identity(self) -> str:
        """What a write with these options writes to, credential-free, the same for every
        spelling of the same table: ``<dialect> <host>:<port>/<database> table <schema.table>``
        (SQLite: the file's absolute path). The default port is filled in; on MySQL/MariaDB
        a table without a database is in the URL's."""
        dialect = self.options.identity_dialect
        where = dialect_for(dialect).identity_where(self.options.url)
        return f"{dialect} {where} table {self.options.identity_table()}"

    def target_instance(self) -> str | None:
        """The server's own identity and the table (:func:`server_instance`)."""
        return server_instance(self.options)
