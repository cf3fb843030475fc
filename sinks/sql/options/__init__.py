"""Spark's JDBC writer options as twopc reads them: their parsed value (:class:`JdbcOptions`,
pickled to the workers, which never parse options) and the connections' waits
(:class:`NetTimeouts`); the parser (:mod:`._jdbc_options`) runs once, on the driver."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypeAlias

from sqlalchemy.engine import URL

from ..._net import keepalive_socket_options
from ..._options import Duration
from .._names import TableName, bookkeeping_table, parse_table_name
from .._registry import SqlDatabase, dialect_for

__all__ = ["CONNECT_TIMEOUT", "JDBC_FORMAT", "LOCK_TIMEOUT", "SOCKET_TIMEOUT", "STAGING_RETENTION", "Dialect",
           "IsolationLevel", "JdbcOptions", "NetTimeouts", "SaveMode", "isolation_sql", "safe_url"]

JDBC_FORMAT = "twopc-jdbc"

#: a dialect's name (:attr:`~twopc.sinks.sql._registry.SqlDatabase.name`): ``postgresql``, ``mysql``, ``other``...
Dialect: TypeAlias = str
CommitMode: TypeAlias = Literal["auto", "prepared", "staging"]
SaveMode: TypeAlias = Literal["append", "overwrite", "errorifexists", "ignore"]
CopyFormat: TypeAlias = Literal["auto", "binary", "csv"]
IsolationLevel: TypeAlias = Literal["READ_UNCOMMITTED", "READ_COMMITTED", "REPEATABLE_READ", "SERIALIZABLE"]

_NO_LIMIT = Duration(0)
LOCK_TIMEOUT = Duration(30_000)
CONNECT_TIMEOUT = Duration(10_000)
SOCKET_TIMEOUT = Duration(60_000)  #: The default socket timeout.
#: ``stagingRetention``'s default: staged rows of a dead write without checkpoint wait a day.
STAGING_RETENTION = Duration(86_400_000)


@dataclass(frozen=True)
class NetTimeouts:
    """The waits of one engine's connections, turned into connect arguments by each dialect:
    *connect* (whole seconds), *reply* (``socketTimeout``, seconds > 0), *keepalive*."""

    connect: int
    reply: float
    keepalive: bool = True

    def tune_socket(self, sock: socket.socket | None) -> None:
        """Set keepalive timing and ``TCP_USER_TIMEOUT`` on a TCP socket (drivers without such
        parameters: PyMySQL); Unix sockets are left alone."""
        if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return
        with contextlib.suppress(OSError):  # an option the platform lacks: the other waits still hold
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, int(self.keepalive))
            if self.keepalive:
                for opt, value in keepalive_socket_options().items():
                    sock.setsockopt(socket.IPPROTO_TCP, opt, value)
            if hasattr(socket, "TCP_USER_TIMEOUT"):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(self.reply * 1000))


@dataclass(frozen=True, repr=False)
class JdbcOptions:
    """The parsed options of one SQL write, built by :meth:`parse` (Spark options) or :meth:`from_kwargs` (a sink's
    constructor arguments), both through one parser. Each field is the option of the same name in camelCase
    (``batch_size`` is ``batchsize``); besides:

    Attributes:
        url: SQLAlchemy URL *with* credentials, driver parameters translated; never print it (:meth:`safe_url`).
            Its query holds no connect timeout (:attr:`connect_timeout`).
        dialect: ``"postgresql"``, ``"mysql"`` (MySQL and MariaDB), ``"sqlite"`` or ``"other"``.
        table: ``dbtable`` as given (stripped); the sink parses it for its dialect.
        driver: the ``driver`` option (a Java class name), for :meth:`describe` only.
        create_table_column_types: column -> type in the order given, names as written.
        upsert_keys: column names, () = append.
        save_mode: normalized (``error``/``default`` -> ``errorifexists``), None when absent.
        twopc_schema: as the database stores the name: where :meth:`bookkeeping` puts twopc's tables.
        connect_timeout, socket_timeout, tcp_keepalive: the option, else the URL's, else the default.
        format_name: the format that read the options (``twopc-jdbc``, ``twopc-postgres``).
    """

    url: URL
    dialect: Dialect
    table: str
    driver: str | None = None
    batch_size: int = 1000
    truncate: bool = False
    create_table_options: str = ""
    create_table_column_types: dict[str, str] = field(default_factory=dict, hash=False)
    table_comment: str = ""
    isolation_level: IsolationLevel = "READ_COMMITTED"
    query_timeout: Duration = _NO_LIMIT
    session_init_statement: str | None = None
    commit_mode: CommitMode = "auto"
    upsert_keys: tuple[str, ...] = ()
    save_mode: SaveMode | None = None
    marker_table: str = "twopc_markers"
    twopc_schema: str | None = None
    staging_table: str | None = None
    staging_retention: Duration = STAGING_RETENTION
    lock_timeout: Duration = LOCK_TIMEOUT
    connect_timeout: Duration = CONNECT_TIMEOUT
    socket_timeout: Duration = SOCKET_TIMEOUT
    tcp_keepalive: bool = True
    copy_format: CopyFormat = "auto"
    dead_letter_table: str | None = None
    format_name: str = JDBC_FORMAT

    @classmethod
    def parse(cls, options: Mapping[str, str], *, format_name: str = JDBC_FORMAT,
              dialect: Dialect | None = None) -> JdbcOptions:
        """Parse the writer options of *format_name* (keys case-insensitive; *dialect*: the only database the format
        writes to). No server is contacted; parameters that only tune a Java JDBC driver are logged at INFO on
        ``twopc.sinks.sql``. Raises ``MissingOptionError``: ``url`` or ``dbtable`` is missing; ``ConfigurationError``:
        an option or URL parameter is invalid, read-only, unsupported or unknown (named, never with the password)."""
        from ._jdbc_options import parse_options  # the reader: the driver's, at planning
        return parse_options(options, format_name, dialect)

    @classmethod
    def from_kwargs(cls, url: str | URL, table: str, *, format_name: str, dialect: Dialect | None,
                    **kwargs: Any) -> JdbcOptions:
        """The options a sink's constructor keywords spell (``lock_timeout`` is ``lockTimeout``...);
        raises ``TypeError`` for an unknown keyword, else as :meth:`parse`."""
        from ._jdbc_options import kwargs_options  # as in parse
        return cls.parse(kwargs_options(url, table, kwargs), format_name=format_name, dialect=dialect)

    def bookkeeping(self, table: TableName) -> TableName:
        """*table* (one of twopc's) in :attr:`twopc_schema` when set and it names no schema."""
        return bookkeeping_table(table, self.twopc_schema, self.dialect, self.url.database or "")

    def net_timeouts(self) -> NetTimeouts:
        """The connect, reply and TCP waits of this write's connections."""
        return NetTimeouts(self.connect_timeout.whole_seconds, self.socket_timeout.seconds, self.tcp_keepalive)

    def safe_url(self) -> str:
        """The URL as a string with the password (and ``sslpassword``) replaced by ``***``."""
        return safe_url(self.url)

    def secrets(self) -> list[str]:
        """:func:`url_secrets` of the URL."""
        return url_secrets(self.url)

    @property
    def identity_dialect(self) -> str:
        """The dialect as target identities name it (MariaDB URLs as ``mysql``)."""
        backend = self.url.get_backend_name()
        claimed = dialect_for(backend)
        return backend if claimed is SqlDatabase else claimed.name

    def identity_table(self) -> str:
        """The target table as target identities name it (MySQL: in the URL's database when it names none)."""
        dialect = self.identity_dialect
        table = parse_table_name(self.table, dialect)
        db = self.url.database or ""
        if dialect_for(dialect).schema_is_database and table.schema is None and db:
            table = TableName(db, table.name, dialect)
        return table.display()

    def describe(self) -> str:
        """``JDBC <dialect> <url without password> table <table>`` (+ driver class)."""
        tail = f" (driver {self.driver})" if self.driver else ""
        return f"JDBC {self.dialect} {self.safe_url()} table {self.table}{tail}"

    def __repr__(self) -> str:
        parts = [f"{f.name}={self.safe_url() if f.name == 'url' else getattr(self, f.name)!r}" for f in fields(self)]
        return f"JdbcOptions({', '.join(parts)})"

    __str__ = __repr__


def safe_url(url: URL) -> str:
    """*url* as text with the password (and ``sslpassword``) replaced by ``***``."""
    from ..._secrets import SECRET_KEYS  # messages' and descriptions': a task that succeeds shows no URL
    hidden = {k: "***" for k in url.query if k.lower() in SECRET_KEYS}
    if hidden:
        url = url.update_query_dict(hidden)
    return url.render_as_string(hide_password=True).replace("%2A%2A%2A", "***")


def url_secrets(url: URL) -> list[str]:
    """Every form (raw, URL-quoted) of *url*'s secrets, longest first, for :func:`twopc.spi.redact`."""
    from ..._secrets import SECRET_KEYS, secret_forms  # as in safe_url
    values: list[str | None] = [url.password]
    for k, v in url.query.items():
        if k.lower() in SECRET_KEYS:
            values.extend(v if isinstance(v, tuple) else (v,))
    return secret_forms(values)


def isolation_sql(level: IsolationLevel) -> str:
    """*level* (an ``isolationLevel`` option, ``READ_COMMITTED``) as SQL spells it (``READ COMMITTED``)."""
    return level.replace("_", " ")
