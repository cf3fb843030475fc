"""The options of every SQL format: ``twopc-jdbc`` (a drop-in for ``df.write.format("jdbc")``)
and ``twopc-postgres``, read once, by :meth:`JdbcOptions.parse`.

Spark's JDBC writer options keep their names and meanings
(https://spark.apache.org/docs/latest/sql-data-sources-jdbc.html); the URL and driver
parameters are translated by :func:`twopc.sinks.sql.options._jdbc_url.translate_url`. No server is contacted.
Keys are case-insensitive (Spark lower-cases them).

Spark's options
===============

==========================  ================================================================
``url``                     a JDBC URL (``jdbc:postgresql://``, ``jdbc:mysql://``,
                            ``jdbc:mariadb://``, ``jdbc:sqlite:``) or a SQLAlchemy URL
``dbtable`` (``table``)     target table (required)
``user``, ``password``      credentials; override those in the URL
``driver``                  Java class name; recorded, must match the URL's database
``batchsize``               rows per ``INSERT`` round trip, >= 1, default 1000
``truncate``                overwrite by truncating instead of dropping (complete mode:
                            instead of deleting), default false
``cascadeTruncate``         only ``false`` (``true`` would empty other tables too)
``createTableOptions``      appended to ``CREATE TABLE``, default ""
``createTableColumnTypes``  ``"name VARCHAR(64), comments TEXT"``: column types for
                            tables twopc creates
``tableComment``            comment of tables twopc creates, default ""
``isolationLevel``          READ_UNCOMMITTED, READ_COMMITTED (default; Spark's is
                            READ_UNCOMMITTED), REPEATABLE_READ, SERIALIZABLE. NONE is
                            refused: twopc needs transactions
``queryTimeout``            statement timeout of the write transactions, a duration
                            (plain number: seconds, as in Spark), 0 (default) = none
``sessionInitStatement``    SQL run at the start of every write session
==========================  ================================================================

Refused with an explanation: ``numPartitions`` (call ``df.coalesce(n)`` instead), the
read-only options (``query``, ``prepareQuery``, ``partitionColumn``, ``lowerBound``,
``upperBound``, ``fetchsize``, ``customSchema``, ``pushDown*``, ``preferTimestampNTZ``,
``preferTimestampNanos``, ``inferTimestampNTZType``, ``hint``) and the Java-only
authentication options (``keytab``, ``principal``, ``refreshKrb5Config``,
``connectionProvider``).

twopc's options
===============

====================  ======================================================================
``commitMode``        ``auto`` (default), ``prepared`` (2PC) or ``staging``
``upsertKeys``        comma-separated key columns (may be quoted); empty = append
``saveMode``          append, overwrite, errorifexists (``error``, ``default``), ignore
``markerTable``       default ``twopc_markers``
``twopcSchema``       the schema (MariaDB/MySQL: database) of twopc's own tables: the
                      marker, ledger, batch marker and staging tables (``markerTable`` and
                      ``stagingTable`` when given without a schema), created when missing.
                      Default: none, the target's schema (the connection's default for the
                      marker and ledger tables). A session default: the Spark conf
                      ``spark.twopc.twopcSchema`` (:func:`twopc.register` reads it).
                      PostgreSQL and MariaDB/MySQL only (elsewhere ignored)
``stagingTable``      explicit staging table name
``stagingRetention``  how long staged rows of a write without checkpoint whose driver died
                      are kept before a later write deletes them, a duration: ``24h``
                      (default), ``30min``... (rows of a driver provably gone on the
                      same machine go at once)
``lockTimeout``       how long a write waits for another transaction's row locks, a
                      duration: ``30s`` (default), ``500ms``, ``2min``, plain seconds
``connectTimeout``    a duration, 1 s .. 1 h, default 10 s
``socketTimeout``     how long a statement waits for the server's reply, a duration, default
                      60 s (at least ``lockTimeout`` + ``queryTimeout`` + 30 s); must be
                      longer than ``lockTimeout`` and ``queryTimeout``. Without the
                      ``lockTimeout`` option, a socket timeout of 30 s or less (the URL's,
                      e.g. pgjdbc's ``?socketTimeout=10``) sets ``lockTimeout`` to half of it
``tcpKeepAlive``      TCP keepalive probes (30 s idle, every 10 s, 3), default true
``copyFormat``        PostgreSQL COPY format: ``auto`` (default), ``binary``, ``csv``
``deadLetterTable``   PostgreSQL prepared mode: rows the server refuses (SQLSTATE class 22/23)
                      go to this table in the same transaction (created when missing)
====================  ======================================================================

``twopc-postgres`` takes the same options with the same meanings, for PostgreSQL URLs
only, and appends to an existing table through prepared transactions: the options that
need the staging mode (table creation, overwrite, upsert, ``saveMode``, ``stagingTable``,
``commitMode=staging``) are refused there with a pointer to ``twopc-jdbc``.

The runtime's options (``checkpointLocation``, ``sinkId``, ``txnAppId``, ``txnVersion``,
``minBatchesToRetain``) and the ones Spark adds (``path``, ``queryName``) are not this
reader's business. Any other option is a driver parameter (Spark hands unknown options to
the JDBC driver): translated, logged, or refused (:mod:`twopc.sinks.sql.options._driver_params`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypeAlias

from sqlalchemy.engine import URL

from twopc import ConfigurationError

from ..._options import Duration, OptionReader
from ..._secrets import redacted_errors
from .._names import TableName, parse_table_name
from .._registry import SqlDatabase, dialect_for
from .._twopc_schema import bookkeeping_table, parse_twopc_schema
from ._column_lists import parse_column_list, parse_column_types
from ._jdbc_url import Dialect, safe_url, translate_url, url_secrets
from ._net_timeouts import NetTimeouts
from ._timeout_rule import SOCKET_TIMEOUT, socket_and_lock_timeouts

__all__ = [
    "JDBC_FORMAT",
    "POSTGRES_FORMAT",
    "SPARK_OPTIONS",
    "STAGING_ONLY_OPTIONS",
    "TWOPC_OPTIONS",
    "CommitMode",
    "CopyFormat",
    "IsolationLevel",
    "JdbcOptions",
    "SaveMode",
    "isolation_sql",
]

JDBC_FORMAT = "twopc-jdbc"
POSTGRES_FORMAT = "twopc-postgres"

CommitMode: TypeAlias = Literal["auto", "prepared", "staging"]
SaveMode: TypeAlias = Literal["append", "overwrite", "errorifexists", "ignore"]
CopyFormat: TypeAlias = Literal["auto", "binary", "csv"]
IsolationLevel: TypeAlias = Literal["READ_UNCOMMITTED", "READ_COMMITTED", "REPEATABLE_READ", "SERIALIZABLE"]

#: Spark JDBC writer options that twopc implements.
SPARK_OPTIONS: tuple[str, ...] = (
    "url", "dbtable", "table", "user", "password", "driver", "batchsize", "truncate",
    "cascadeTruncate", "createTableOptions", "createTableColumnTypes", "tableComment",
    "isolationLevel", "queryTimeout", "sessionInitStatement",
)
#: twopc's own options.
TWOPC_OPTIONS: tuple[str, ...] = (
    "commitMode", "upsertKeys", "saveMode", "markerTable", "twopcSchema", "stagingTable", "stagingRetention",
    "lockTimeout", "connectTimeout", "socketTimeout", "tcpKeepAlive", "copyFormat", "deadLetterTable",
)
#: Options that only the staging mode of ``twopc-jdbc`` can serve.
STAGING_ONLY_OPTIONS: tuple[str, ...] = (
    "truncate", "createTableOptions", "createTableColumnTypes", "tableComment", "upsertKeys",
    "saveMode", "stagingTable", "stagingRetention",
)

_READ_ONLY = "only affects reading with Spark's JDBC source; remove it from the write"
_KERBEROS = ("is Kerberos login of the Java JDBC driver, which twopc does not support (it "
             "connects with Python drivers): authenticate with user/password or TLS client "
             "certificates in the URL")
#: Spark options that are refused, with the reason (keys lower-case).
REJECTED_OPTIONS: dict[str, tuple[str, str]] = {
    "numpartitions": ("numPartitions",
                      ("makes Spark's JDBC writer coalesce the DataFrame; twopc writes the "
                      "partitions it is given, one transaction each. Call df.coalesce(n) (or "
                      "df.repartition(n)) before .write instead")),
    "query": ("query", "is read-only: a write needs dbtable, the target table"),
    "preparequery": ("prepareQuery", _READ_ONLY),
    "partitioncolumn": ("partitionColumn", _READ_ONLY),
    "lowerbound": ("lowerBound", _READ_ONLY),
    "upperbound": ("upperBound", _READ_ONLY),
    "fetchsize": ("fetchsize", _READ_ONLY),
    "customschema": ("customSchema", _READ_ONLY),
    "pushdownpredicate": ("pushDownPredicate", _READ_ONLY),
    "pushdownaggregate": ("pushDownAggregate", _READ_ONLY),
    "pushdownlimit": ("pushDownLimit", _READ_ONLY),
    "pushdownoffset": ("pushDownOffset", _READ_ONLY),
    "pushdowntablesample": ("pushDownTableSample", _READ_ONLY),
    "pushdownjoin": ("pushDownJoin", _READ_ONLY),
    "prefertimestampntz": ("preferTimestampNTZ", _READ_ONLY),
    "prefertimestampnanos": ("preferTimestampNanos", _READ_ONLY),
    "infertimestampntztype": ("inferTimestampNTZType",
                              _READ_ONLY + " (it is the pre-release name of preferTimestampNTZ)"),
    "hint": ("hint", _READ_ONLY),
    "keytab": ("keytab", _KERBEROS),
    "principal": ("principal", _KERBEROS),
    "refreshkrb5config": ("refreshKrb5Config", _KERBEROS),
    "connectionprovider": ("connectionProvider",
                           ("selects a Java JDBC connection provider plugin, which twopc "
                           "cannot use (it connects with Python drivers); remove it")),
}

_JAVA_CLASS = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*(\.[A-Za-z_$][A-Za-z0-9_$]*)*$")
_ISOLATION_LEVELS: tuple[IsolationLevel, ...] = ("READ_UNCOMMITTED", "READ_COMMITTED", "REPEATABLE_READ",
                                                 "SERIALIZABLE")
_SAVE_MODES: dict[str, SaveMode] = {"append": "append", "overwrite": "overwrite", "errorifexists": "errorifexists",
                                    "error": "errorifexists", "default": "errorifexists", "ignore": "ignore"}
_MAX_CONNECT = Duration(3_600_000)
_NO_LIMIT = Duration(0)
_LOCK_TIMEOUT = Duration(30_000)
_CONNECT_TIMEOUT = Duration(10_000)
#: ``stagingRetention``'s default: staged rows of a dead write without checkpoint wait a day.
STAGING_RETENTION = Duration(86_400_000)
#: keyword arguments of the sinks' constructors -> option names
_KWARG_OPTIONS = {
    "user": "user", "password": "password", "driver": "driver", "batch_size": "batchsize",
    "truncate": "truncate", "create_table_options": "createTableOptions",
    "create_table_column_types": "createTableColumnTypes", "table_comment": "tableComment",
    "isolation_level": "isolationLevel", "query_timeout": "queryTimeout",
    "session_init_statement": "sessionInitStatement", "commit_mode": "commitMode",
    "upsert_keys": "upsertKeys", "save_mode": "saveMode", "marker_table": "markerTable",
    "twopc_schema": "twopcSchema",
    "staging_table": "stagingTable", "staging_retention": "stagingRetention",
    "lock_timeout": "lockTimeout", "connect_timeout": "connectTimeout", "dead_letter_table": "deadLetterTable",
    "copy_format": "copyFormat", "socket_timeout": "socketTimeout", "tcp_keepalive": "tcpKeepAlive",
}


@dataclass(frozen=True, repr=False)
class JdbcOptions:
    """The parsed options of one SQL write. Build it with :meth:`parse` (Spark options) or
    :meth:`from_kwargs` (a sink's constructor arguments); both read through one parser.

    Attributes:
        url: SQLAlchemy URL *with* credentials, driver parameters translated. Never print
            it: use :meth:`safe_url`. Its query never holds a connect timeout; that is
            :attr:`connect_timeout`, for the sink to pass as a connect argument.
        dialect: ``"postgresql"``, ``"mysql"`` (MySQL and MariaDB, driver PyMySQL),
            ``"sqlite"`` or ``"other"`` (any other SQLAlchemy backend).
        table: ``dbtable`` as given (stripped); the sink parses it for its dialect.
        driver: the ``driver`` option (a Java class name), for :meth:`describe` only.
        batch_size: ``batchsize``.
        truncate: ``truncate``: overwrite by TRUNCATE instead of DROP + CREATE.
        create_table_options: ``createTableOptions``, appended to CREATE TABLE verbatim.
        create_table_column_types: ``createTableColumnTypes`` as column -> type, in the
            order given; names as written (Spark matches them case-insensitively).
        table_comment: ``tableComment`` for tables twopc creates.
        isolation_level: one of READ_UNCOMMITTED, READ_COMMITTED, REPEATABLE_READ,
            SERIALIZABLE.
        query_timeout: ``queryTimeout``, 0 = none.
        session_init_statement: ``sessionInitStatement`` or None.
        commit_mode: ``commitMode``.
        upsert_keys: ``upsertKeys`` column names, () = append.
        save_mode: ``saveMode`` normalized (``error``/``default`` -> ``errorifexists``),
            None when absent.
        marker_table: ``markerTable``.
        twopc_schema: ``twopcSchema`` as the database stores the name, or None: where
            :meth:`bookkeeping` puts twopc's tables.
        staging_table: ``stagingTable`` or None.
        staging_retention: ``stagingRetention``: how long staged rows of a dead write
            without checkpoint are kept (see :mod:`twopc.sinks.sql.staging._sink`).
        lock_timeout: ``lockTimeout``; without it, 30 s, or half the socket timeout when
            that is 30 s or less.
        connect_timeout: the ``connectTimeout`` option; else the URL's
            ``connectTimeout``/``loginTimeout``; else 10 s.
        socket_timeout: the ``socketTimeout`` option; else the URL's ``socketTimeout``;
            else 60 s, or ``lockTimeout`` + ``queryTimeout`` + 30 s when that is longer.
        tcp_keepalive: the ``tcpKeepAlive`` option; else the URL's; else true.
        copy_format: ``copyFormat`` (PostgreSQL only).
        dead_letter_table: ``deadLetterTable`` (PostgreSQL prepared mode only): where rows the
            server refuses go, in the same transaction (:mod:`twopc.sinks.postgres._dead_letter`).
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
    lock_timeout: Duration = _LOCK_TIMEOUT
    connect_timeout: Duration = _CONNECT_TIMEOUT
    socket_timeout: Duration = SOCKET_TIMEOUT
    tcp_keepalive: bool = True
    copy_format: CopyFormat = "auto"
    dead_letter_table: str | None = None
    format_name: str = JDBC_FORMAT

    # -- building --------------------------------------------------------------------------
    @classmethod
    def parse(cls, options: Mapping[str, str], *, format_name: str = JDBC_FORMAT,
              dialect: Dialect | None = None) -> JdbcOptions:
        """Parse the writer options of *format_name* (keys case-insensitive).

        *dialect*, when given, is the only database the format writes to (``twopc-postgres``:
        ``postgresql``). No server is contacted. Parameters that only tune a Java JDBC
        driver are logged at INFO on the ``twopc.sinks.sql`` logger.

        Raises:
            MissingOptionError: ``url`` or ``dbtable`` is missing.
            ConfigurationError: an option or URL parameter is invalid, read-only,
                unsupported or unknown (the message names it, and never contains the
                password).
        """
        with redacted_errors(options):
            return cls._parse(OptionReader(options, format_name), dialect)

    @classmethod
    def from_kwargs(cls, url: str | URL, table: str, *, format_name: str, dialect: Dialect | None,
                    **kwargs: Any) -> JdbcOptions:
        """The options a sink's constructor arguments spell: each keyword is an option
        (``lock_timeout`` is ``lockTimeout``...), read by the same parser as Spark's.

        Raises:
            TypeError: an unknown keyword.
            ConfigurationError: as :meth:`parse`.
        """
        options = {"url": url.render_as_string(hide_password=False) if isinstance(url, URL) else url,
                   "dbtable": table}
        for key, value in kwargs.items():
            name = _KWARG_OPTIONS.get(key)
            if name is None:
                raise TypeError(f"unexpected keyword argument {key!r}")
            if value is not None:
                options[name] = _option_text(value)
        return cls.parse(options, format_name=format_name, dialect=dialect)

    @classmethod
    def _parse(cls, r: OptionReader, only: Dialect | None) -> JdbcOptions:
        for key in list(r.unclaimed()):
            rejected = REJECTED_OPTIONS.get(key.lower())
            if rejected is not None:
                raise ConfigurationError(f"{r.format_name} does not support option {rejected[0]}: it {rejected[1]}")
        raw_url = r.required("url", '.option("url", "jdbc:postgresql://host:5432/db") or a SQLAlchemy URL '
                                    'such as "postgresql://host:5432/db"')
        table = _table_option(r)
        values: dict[str, Any] = {
            "driver": r.text("driver"),
            "batch_size": r.integer("batchsize", 1000, minimum=1),
            "isolation_level": _isolation(r.text("isolationLevel")),
            "query_timeout": r.duration("queryTimeout", 0),
            "session_init_statement": r.text("sessionInitStatement"),
            "marker_table": r.text("markerTable", "twopc_markers"),
            "lock_timeout": r.duration("lockTimeout", _LOCK_TIMEOUT),
            "copy_format": r.choice("copyFormat", ("auto", "binary", "csv"), "auto"),
            "commit_mode": r.choice("commitMode", ("auto", "prepared", "staging"), "auto"),
            "dead_letter_table": _dead_letter_option(r),
        }
        staging, staging_given = cls._staging_options(r)
        connect_option = r.text("connectTimeout")
        schema_option = r.text("twopcSchema")
        socket_option = r.text("socketTimeout")
        keepalive_option = r.text("tcpKeepAlive")
        secrets = {k: r.get(k) for k in ("user", "password")}
        supported = SPARK_OPTIONS + TWOPC_OPTIONS
        translated = translate_url(raw_url, user=secrets["user"], password=secrets["password"],
                                   properties=list(r.unclaimed().items()), supported=supported)
        dialect = translated.dialect
        if only is not None and dialect != only:
            raise ConfigurationError(
                f"{r.format_name} writes to {dialect_for(only).label or only}, but the url is a "
                f"{dialect_for(dialect).label or dialect} URL: use format {JDBC_FORMAT} for other databases")
        values["driver"] = _driver(values["driver"], dialect)
        connect = (Duration.parse(connect_option, "connectTimeout") if connect_option is not None
                   else Duration(translated.connect_timeout * 1000) if translated.connect_timeout
                   else Duration(10_000))
        if not Duration(1000) <= connect <= _MAX_CONNECT:
            source = "option connectTimeout" if connect_option is not None else "the connect timeout in the url"
            raise ConfigurationError(
                f"{source} is {connect.seconds:g} seconds; it must be between 1 and {_MAX_CONNECT.seconds:g} seconds "
                f"(a plain number is seconds; MySQL's JDBC URL parameter connectTimeout is in milliseconds)")
        values["socket_timeout"], values["lock_timeout"] = socket_and_lock_timeouts(
            socket_option, translated.socket_timeout_ms, values["lock_timeout"], values["query_timeout"],
            lock_given=r.text("lockTimeout") is not None, dialect=dialect)
        values["tcp_keepalive"] = (r.boolean("tcpKeepAlive", True, strict=True) if keepalive_option is not None
                                   else translated.tcp_keepalive is not False)
        values["twopc_schema"] = parse_twopc_schema(schema_option, dialect)
        options = cls(url=translated.url, dialect=dialect, table=table, connect_timeout=connect,
                      format_name=r.format_name, **values, **staging)
        options._check_combinations(staging_given)
        return options

    @staticmethod
    def _staging_options(r: OptionReader) -> tuple[dict[str, Any], list[str]]:
        """The options only the staging mode serves, and which of them were given."""
        if r.boolean("cascadeTruncate", False, strict=True):
            raise ConfigurationError(
                "cascadeTruncate=true is not supported: TRUNCATE ... CASCADE would also empty "
                "every table that references the target table by a foreign key, which twopc "
                "cannot make exactly-once. Remove the option (or set it to false)")
        save_text = r.text("saveMode")
        if save_text is not None and save_text.lower() not in _SAVE_MODES:
            raise ConfigurationError(f"saveMode must be append, overwrite, errorifexists (or error, default) or "
                                     f"ignore, got {save_text!r}")
        staging_table = r.get("stagingTable")
        if staging_table is not None and not staging_table.strip():
            raise ConfigurationError("stagingTable is empty: give a table name or leave the option out")
        given = [name for name in STAGING_ONLY_OPTIONS if r.get(name) is not None]
        return {
            "truncate": r.boolean("truncate", False, strict=True),
            "create_table_options": r.text("createTableOptions", "") or "",
            "create_table_column_types": parse_column_types(r.text("createTableColumnTypes", "") or ""),
            "table_comment": r.text("tableComment", "") or "",
            "upsert_keys": tuple(parse_column_list(r.text("upsertKeys", "") or "", "upsertKeys")),
            "save_mode": _SAVE_MODES[save_text.lower()] if save_text is not None else None,
            "staging_table": staging_table.strip() if staging_table is not None else None,
            "staging_retention": r.duration("stagingRetention", STAGING_RETENTION),
        }, given

    def _check_combinations(self, staging_given: list[str]) -> None:
        dialect = dialect_for(self.dialect)
        if self.commit_mode == "prepared" and not dialect.prepares:
            raise ConfigurationError(f"commitMode=prepared is not possible here: {dialect.no_prepare_reason}; use "
                                     f"commitMode=staging (or auto)")
        if self.copy_format != "auto" and not dialect.copy_formats:
            raise ConfigurationError(
                f"copyFormat={self.copy_format} applies only to PostgreSQL (COPY); this URL is {self.dialect}: "
                f"remove the option")
        if self.dead_letter_table is not None and (not dialect.dead_letters or self.commit_mode == "staging"
                                                   or staging_given):
            raise ConfigurationError(
                "deadLetterTable is supported on PostgreSQL in the prepared commit mode only (twopc-postgres, or "
                "twopc-jdbc appending to a PostgreSQL table); this write is "
                + (f"to {self.dialect}" if not dialect.dead_letters else "in the staging mode")
                + ": remove the option")
        if self.format_name != JDBC_FORMAT:
            given = staging_given + (["commitMode=staging"] if self.commit_mode == "staging" else [])
            if given:
                raise ConfigurationError(
                    f"{self.format_name} appends to an existing table through prepared transactions; "
                    f"{', '.join(given)} need(s) the staging commit mode: use format {JDBC_FORMAT} "
                    f"(same options) instead")

    def bookkeeping(self, table: TableName) -> TableName:
        """*table*, one of twopc's own tables, in :attr:`twopc_schema` when it names no
        schema and the option is set (:func:`~twopc.sinks.sql._twopc_schema.bookkeeping_table`)."""
        return bookkeeping_table(table, self.twopc_schema, self.dialect, self.url.database or "")

    def net_timeouts(self) -> NetTimeouts:
        """The connect, reply and TCP waits of this write's connections."""
        return NetTimeouts(self.connect_timeout.whole_seconds, self.socket_timeout.seconds, self.tcp_keepalive)

    # -- presentation ----------------------------------------------------------------------
    def safe_url(self) -> str:
        """The URL as a string with the password (and ``sslpassword``) replaced by ``***``."""
        return safe_url(self.url)

    def secrets(self) -> list[str]:
        """Every form (raw, URL-quoted) of the password and of other secret URL parameters,
        longest first, for :func:`twopc.spi.redact`."""
        return url_secrets(self.url)

    @property
    def identity_dialect(self) -> str:
        """The dialect as target identities name it (MariaDB URLs as ``mysql``)."""
        backend = self.url.get_backend_name()
        claimed = dialect_for(backend)
        return backend if claimed is SqlDatabase else claimed.name

    def identity_table(self) -> str:
        """The target table as a target identity names it (:meth:`SqlNamedTarget.target_identity`
        in :mod:`twopc.sinks.sql.connect._server_instance`): as the database reads
        ``dbtable``; on MySQL/MariaDB a table without a database is in the URL's."""
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
        parts = []
        for f in fields(self):
            value = self.safe_url() if f.name == "url" else getattr(self, f.name)
            parts.append(f"{f.name}={value!r}")
        return f"JdbcOptions({', '.join(parts)})"

    __str__ = __repr__


def _option_text(value: Any) -> str:
    """A constructor argument as the text of its option."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return ", ".join(f"`{k.replace('`', '``')}` {v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(f"`{str(v).replace('`', '``')}`" for v in value)
    return str(value)


def _dead_letter_option(r: OptionReader) -> str | None:
    text = r.text("deadLetterTable")
    if text is not None and not text.strip():
        raise ConfigurationError("deadLetterTable is empty: give a table name or leave the option out")
    return text.strip() if text is not None else None


def _table_option(r: OptionReader) -> str:
    dbtable, table = r.get("dbtable"), r.get("table")
    if dbtable is not None and table is not None and dbtable.strip() != table.strip():
        raise ConfigurationError("options dbtable and table are both given, with different values: "
                                 "give only dbtable")
    text = (dbtable if dbtable is not None else table or "").strip()
    if not text:
        raise r.missing("dbtable", '.option("dbtable", "public.events")', aliases=("table",))
    if text.startswith("("):
        raise ConfigurationError(
            f"dbtable {text!r} is a subquery, which can only be read; a write needs a table name")
    return text


def isolation_sql(level: IsolationLevel) -> str:
    """*level* (an ``isolationLevel`` option, ``READ_COMMITTED``) as SQL spells it (``READ COMMITTED``)."""
    return level.replace("_", " ")


def _isolation(text: str | None) -> IsolationLevel:
    if text is None:
        return "READ_COMMITTED"
    t = "_".join(re.split(r"[\s_-]+", text.strip().upper()))
    if t == "NONE":
        raise ConfigurationError(
            "isolationLevel=NONE is not supported: twopc needs transactions to write exactly once; "
            "use READ_COMMITTED (the default) or a stricter level")
    for level in _ISOLATION_LEVELS:
        if t == level:
            return level
    raise ConfigurationError(f"isolationLevel must be one of {', '.join(_ISOLATION_LEVELS)}, got {text!r}")


def _driver(text: str | None, dialect: Dialect) -> str | None:
    if text is None:
        return None
    if not _JAVA_CLASS.match(text):
        raise ConfigurationError(
            f"driver {text!r} is not a Java class name (e.g. org.postgresql.Driver); twopc "
            f"does not need it and only records it")
    expected = dialect_for(text.lower())
    if expected is not SqlDatabase and dialect != "other" and expected.name != dialect:
        raise ConfigurationError(f"driver {text} is a {expected.name} driver, but the url is a {dialect} URL")
    return text
