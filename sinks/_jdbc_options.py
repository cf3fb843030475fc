"""Options of the ``twopc-jdbc`` format: a drop-in for ``df.write.format("jdbc")``.

:meth:`JdbcOptions.parse` reads the options of Spark's JDBC writer, with Spark's names
and meanings (https://spark.apache.org/docs/latest/sql-data-sources-jdbc.html), plus
twopc's own, and translates the JDBC URL into a SQLAlchemy URL for a Python driver
(psycopg 3, PyMySQL, sqlite3). It never contacts the server. Keys are case-insensitive
(Spark lower-cases them).

Spark's options
===============

==========================  ================================================================
``url``                     ``jdbc:postgresql://host[:port][,host2[:port]]/db?...``,
                            ``jdbc:mysql://host[:port]/db?...``, ``jdbc:mariadb://...``,
                            ``jdbc:sqlite:/path/file.db``; or a SQLAlchemy URL
                            (``postgresql://``, ``mysql://``, ``mariadb://``, ``sqlite:///``,
                            or any other backend, e.g. ``mssql+pyodbc://``)
``dbtable`` (``table``)     target table (required)
``user``, ``password``      credentials; override those in the URL
``driver``                  Java class name; recorded, not needed
``batchsize``               rows per batch, >= 1, default 1000
``truncate``                overwrite by truncating instead of dropping, default false
``cascadeTruncate``         only ``false`` (``true`` would empty other tables too)
``createTableOptions``      appended to ``CREATE TABLE``, default ""
``createTableColumnTypes``  ``"name VARCHAR(64), comments TEXT"``: column types for
                            tables twopc creates
``tableComment``            comment of tables twopc creates, default ""
``isolationLevel``          READ_UNCOMMITTED, READ_COMMITTED (default; Spark's is
                            READ_UNCOMMITTED), REPEATABLE_READ, SERIALIZABLE. NONE is
                            refused: twopc needs transactions
``queryTimeout``            seconds per statement, 0 (default) = no limit
``sessionInitStatement``    SQL run on every new session
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
``stagingTable``      explicit staging table name
``lockTimeout``       lock wait limit, e.g. ``30s`` (default), ``500ms``, ``2min``
``connectTimeout``    seconds, 1..3600, default 10
``copyFormat``        PostgreSQL COPY format: ``auto`` (default), ``binary``, ``csv``
====================  ======================================================================

The runtime's options (``checkpointLocation``, ``sinkId``, ``txnAppId``, ``txnVersion``,
``minBatchesToRetain``) and ``path`` are ignored here.

Driver parameters
=================

Parameters in the JDBC URL's query string, and any other option key (Spark hands unknown
options to the JDBC driver as connection properties), are translated to the Python
driver's equivalent, accepted with an INFO log when they only tune the Java driver, and
refused otherwise: a parameter is never dropped silently. See :data:`PG_PARAMETERS`,
:data:`MYSQL_PARAMETERS`, :data:`SQLITE_PARAMETERS` and the ``*_JAVA_ONLY`` sets. Query
parameters of a SQLAlchemy URL are the driver's own and are passed through unchanged.

Differences from the Java drivers, on purpose:

- PostgreSQL ``ssl=true`` without ``sslmode`` means ``sslmode=verify-full`` (pgjdbc's
  meaning; libpq's default would not verify the server).
- MySQL: PyMySQL has no opportunistic TLS. An explicit ``useSSL=true`` or
  ``sslMode=PREFERRED`` therefore *requires* TLS (without certificate check, like
  ``REQUIRED``); with no TLS parameter at all the connection is not encrypted.
  ``VERIFY_CA`` / ``VERIFY_IDENTITY`` need the CA as a PEM file (``serverSslCert``):
  PyMySQL cannot read Java trust stores.
- A connect timeout of 0 ("wait forever") is not supported: twopc always uses a finite
  one (the ``connectTimeout`` option, default 10 s).
"""

from __future__ import annotations

import logging
import math
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Literal, NamedTuple, TypeAlias, cast

from sqlalchemy.engine import URL, make_url

from twopc import ConfigurationError, MissingOptionError, redact
from twopc._options import RUNTIME_KEYS

__all__ = [
    "MYSQL_JAVA_ONLY",
    "MYSQL_PARAMETERS",
    "PG_JAVA_ONLY",
    "PG_PARAMETERS",
    "SQLITE_PARAMETERS",
    "JdbcOptions",
    "parse_column_list",
    "parse_column_types",
]

log = logging.getLogger("twopc.sinks.jdbc")

Dialect: TypeAlias = Literal["postgresql", "mysql", "sqlite", "other"]
CommitMode: TypeAlias = Literal["auto", "prepared", "staging"]
SaveMode: TypeAlias = Literal["append", "overwrite", "errorifexists", "ignore"]
CopyFormat: TypeAlias = Literal["auto", "binary", "csv"]
IsolationLevel: TypeAlias = Literal["READ_UNCOMMITTED", "READ_COMMITTED", "REPEATABLE_READ", "SERIALIZABLE"]

# -- option catalogue -----------------------------------------------------------------------

#: Spark JDBC writer options that twopc-jdbc implements.
SPARK_OPTIONS: tuple[str, ...] = (
    "url", "dbtable", "table", "user", "password", "driver", "batchsize", "truncate",
    "cascadeTruncate", "createTableOptions", "createTableColumnTypes", "tableComment",
    "isolationLevel", "queryTimeout", "sessionInitStatement",
)
#: twopc's own options.
TWOPC_OPTIONS: tuple[str, ...] = (
    "commitMode", "upsertKeys", "saveMode", "markerTable", "stagingTable", "lockTimeout",
    "connectTimeout", "copyFormat",
)
#: Options of the twopc runtime (and Spark's ``path``): not this parser's business.
IGNORED_OPTIONS: frozenset[str] = frozenset(RUNTIME_KEYS) | frozenset(
    {"checkpointlocation", "sinkid", "txnappid", "txnversion", "minbatchestoretain", "path"})

_READ_ONLY = "only affects reading with Spark's JDBC source; remove it from the write"
_KERBEROS = ("is Kerberos login of the Java JDBC driver, which twopc-jdbc does not support (it "
             "connects with Python drivers): authenticate with user/password or TLS client "
             "certificates in the URL")
#: Spark options that are refused, with the reason (keys lower-case).
REJECTED_OPTIONS: dict[str, tuple[str, str]] = {
    "numpartitions": ("numPartitions",
                      "makes Spark's JDBC writer coalesce the DataFrame; twopc-jdbc writes the "
                      "partitions it is given, one transaction each. Call df.coalesce(n) (or "
                      "df.repartition(n)) before .write instead"),
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
                           "selects a Java JDBC connection provider plugin, which twopc-jdbc "
                           "cannot use (it connects with Python drivers); remove it"),
}

_KNOWN_OPTIONS = frozenset(k.lower() for k in SPARK_OPTIONS + TWOPC_OPTIONS)

#: PostgreSQL JDBC parameters translated to libpq (psycopg) equivalents.
PG_PARAMETERS: tuple[str, ...] = (
    "user", "password", "ssl", "sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword",
    "applicationName", "connectTimeout", "loginTimeout", "currentSchema", "options",
    "targetServerType", "gssEncMode", "channelBinding", "loadBalanceHosts",
)
#: PostgreSQL JDBC parameters that only tune the Java driver: accepted, logged at INFO.
PG_JAVA_ONLY: tuple[str, ...] = (
    "reWriteBatchedInserts", "stringtype", "prepareThreshold", "tcpKeepAlive", "tcpNoDelay",
    "defaultRowFetchSize", "binaryTransfer", "binaryTransferEnable", "binaryTransferDisable",
    "preparedStatementCacheQueries", "preparedStatementCacheSizeMiB", "preferQueryMode",
    "loggerLevel", "loggerFile", "logUnclosedConnections", "assumeMinServerVersion",
    "receiveBufferSize", "sendBufferSize", "disableColumnSanitiser", "socketTimeout",
    "cancelSignalTimeout", "escapeSyntaxCallMode", "maxResultBuffer", "adaptiveFetch",
    "adaptiveFetchMinimum", "adaptiveFetchMaximum", "logServerErrorDetail",
    "quoteReturningIdentifiers", "hideUnprivilegedObjects", "hostRecheckSeconds",
    "cleanupSavepoints",
)
#: MySQL / MariaDB JDBC parameters translated to PyMySQL equivalents.
MYSQL_PARAMETERS: tuple[str, ...] = (
    "user", "password", "sslMode", "useSSL", "requireSSL", "verifyServerCertificate",
    "trustServerCertificate", "disableSslHostnameVerification", "serverSslCert",
    "connectTimeout", "socketTimeout", "characterEncoding", "serverTimezone",
    "connectionTimeZone",
)
#: MySQL / MariaDB JDBC parameters that only tune the Java driver: accepted, logged at INFO.
MYSQL_JAVA_ONLY: tuple[str, ...] = (
    "rewriteBatchedStatements", "useServerPrepStmts", "cachePrepStmts", "prepStmtCacheSize",
    "prepStmtCacheSqlLimit", "useUnicode", "useLegacyDatetimeCode",
    "useJDBCCompliantTimezoneShift", "allowPublicKeyRetrieval", "zeroDateTimeBehavior",
    "tcpKeepAlive", "tcpNoDelay", "useCompression", "useLocalSessionState",
    "elideSetAutoCommits", "maintainTimeStats", "cacheResultSetMetadata",
    "cacheServerConfiguration", "useCursorFetch", "defaultFetchSize", "tinyInt1isBit",
    "transformedBitIsBoolean", "yearIsDateType", "autoReconnect", "useBulkStmts",
    "useBatchMultiSend", "useReadAheadInput", "dumpQueriesOnException", "profileSQL", "logger",
)
#: SQLite JDBC (xerial) parameters translated to sqlite3 equivalents.
SQLITE_PARAMETERS: tuple[str, ...] = ("busy_timeout",)

_PG_JAVA_ONLY = frozenset(k.lower() for k in PG_JAVA_ONLY)
_MYSQL_JAVA_ONLY = frozenset(k.lower() for k in MYSQL_JAVA_ONLY)

#: Known parameters that are refused, with specific advice (keys lower-case).
_PG_REFUSED: dict[str, str] = {
    "sslfactory": "is a Java SSL socket factory; use sslmode (e.g. sslmode=require instead of "
                  "NonValidatingFactory, or sslmode=verify-full with sslrootcert)",
    "sslhostnameverifier": "is a Java class; use sslmode=verify-full to check the host name, "
                           "or sslmode=verify-ca not to",
    "sslpasswordcallback": "is a Java class; give the key's password as sslpassword",
    "readonly": "would make every write fail",
    "autosave": "changes transaction semantics on errors; twopc manages its transactions itself",
}
_MYSQL_REFUSED: dict[str, str] = {
    "trustcertificatekeystoreurl": "is a Java key store, which PyMySQL cannot read: give the CA "
                                   "certificate as a PEM file with serverSslCert=/path/ca.pem",
    "clientcertificatekeystoreurl": "is a Java key store, which PyMySQL cannot read: use a "
                                    "SQLAlchemy URL mysql+pymysql://...?ssl_cert=/path/cert.pem"
                                    "&ssl_key=/path/key.pem",
    "keystore": "is a Java key store, which PyMySQL cannot read: use a SQLAlchemy URL "
                "mysql+pymysql://...?ssl_cert=/path/cert.pem&ssl_key=/path/key.pem",
    "sessionvariables": "runs arbitrary SET statements on connect; use sessionInitStatement",
    "readonly": "would make every write fail",
}

_MYSQL_TLS_KEYS = frozenset({"sslmode", "usessl", "requiressl", "verifyservercertificate",
                             "trustservercertificate", "disablesslhostnameverification", "serversslcert"})
_PG_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_MYSQL_SSLMODES = {
    "disabled": "disabled", "disable": "disabled",
    "preferred": "preferred",
    "required": "required", "trust": "required",
    "verify_ca": "verify_ca", "verify-ca": "verify_ca",
    "verify_identity": "verify_identity", "verify-full": "verify_identity",
}
_UTC_NAMES = frozenset({"utc", "etc/utc", "gmt", "etc/gmt", "z", "+00:00", "-00:00", "+0", "utc+0",
                        "gmt+0", "universal", "zulu"})
_UTF8_NAMES = frozenset({"utf-8", "utf8", "utf8mb4"})

_JAVA_CLASS = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*(\.[A-Za-z_$][A-Za-z0-9_$]*)*$")
_KNOWN_DRIVERS: dict[str, Dialect] = {
    "org.postgresql.driver": "postgresql",
    "com.mysql.cj.jdbc.driver": "mysql",
    "com.mysql.jdbc.driver": "mysql",
    "org.mariadb.jdbc.driver": "mysql",
    "org.sqlite.jdbc": "sqlite",
}
_LOCK_TIMEOUT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|min|h|d)?\s*$")
_LOCK_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "min": 60_000.0, "h": 3_600_000.0, "d": 86_400_000.0}
_ISOLATION_LEVELS: tuple[str, ...] = ("READ_UNCOMMITTED", "READ_COMMITTED", "REPEATABLE_READ", "SERIALIZABLE")
_SAVE_MODES = {"append": "append", "overwrite": "overwrite", "errorifexists": "errorifexists",
               "error": "errorifexists", "default": "errorifexists", "ignore": "ignore"}
_MAX_CONNECT_TIMEOUT = 3600


# -- the options -----------------------------------------------------------------------------

@dataclass(frozen=True, repr=False)
class JdbcOptions:
    """The parsed options of one ``twopc-jdbc`` write. Build it with :meth:`parse`.

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
        query_timeout: ``queryTimeout`` seconds, 0 = none.
        session_init_statement: ``sessionInitStatement`` or None.
        commit_mode: ``commitMode``.
        upsert_keys: ``upsertKeys`` column names, () = append.
        save_mode: ``saveMode`` normalized (``error``/``default`` -> ``errorifexists``),
            None when absent.
        marker_table: ``markerTable``.
        staging_table: ``stagingTable`` or None.
        lock_timeout: ``lockTimeout`` normalized (no spaces), e.g. ``"30s"``; see
            :attr:`lock_timeout_ms`.
        connect_timeout: seconds (the ``connectTimeout`` option; else the URL's
            ``connectTimeout``/``loginTimeout`` converted to seconds; else 10).
        copy_format: ``copyFormat`` (PostgreSQL only).
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
    query_timeout: int = 0
    session_init_statement: str | None = None
    commit_mode: CommitMode = "auto"
    upsert_keys: tuple[str, ...] = ()
    save_mode: SaveMode | None = None
    marker_table: str = "twopc_markers"
    staging_table: str | None = None
    lock_timeout: str = "30s"
    connect_timeout: int = 10
    copy_format: CopyFormat = "auto"

    # -- parsing ---------------------------------------------------------------------------

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> JdbcOptions:
        """Parse the options of ``df.write.format("twopc-jdbc")`` (keys case-insensitive).

        No server is contacted. Parameters that only tune a Java JDBC driver are logged at
        INFO on the ``twopc.sinks.jdbc`` logger.

        Raises:
            MissingOptionError: ``url`` or ``dbtable`` is missing.
            ConfigurationError: an option or URL parameter is invalid, read-only,
                unsupported or unknown (the message names it, and never contains the
                password).
        """
        guesses = _secret_guesses(options)
        try:
            return cls._parse(options)
        except ConfigurationError as exc:
            raise type(exc)(redact(str(exc), guesses)) from None

    @classmethod
    def _parse(cls, options: Mapping[str, str]) -> JdbcOptions:
        opts = _lower_keys(options)

        def get(name: str) -> str | None:
            return opts.get(name.lower())

        for key in opts:
            if key in REJECTED_OPTIONS:
                name, why = REJECTED_OPTIONS[key]
                raise ConfigurationError(f"twopc-jdbc does not support option {name}: it {why}")

        raw_url = get("url")
        if raw_url is None or not raw_url.strip():
            raise MissingOptionError(
                'twopc-jdbc needs option "url", e.g. .option("url", '
                '"jdbc:postgresql://host:5432/db") or a SQLAlchemy URL such as '
                '"postgresql://host:5432/db"')
        table = _table_option(get("dbtable"), get("table"))

        spelled = {k.lower(): k for k in options}
        properties = [(spelled[k], v) for k, v in opts.items()
                      if k not in _KNOWN_OPTIONS and k not in IGNORED_OPTIONS]
        url, dialect, url_timeout = _build_url(raw_url.strip(), properties, get("user"), get("password"))

        driver = _driver(get("driver"), dialect)
        batch_size = _int_option("batchsize", get("batchsize"), 1000, minimum=1)
        truncate = _bool_option("truncate", get("truncate"), False)
        if _bool_option("cascadeTruncate", get("cascadeTruncate"), False):
            raise ConfigurationError(
                "cascadeTruncate=true is not supported: TRUNCATE ... CASCADE would also empty "
                "every table that references the target table by a foreign key, which twopc "
                "cannot make exactly-once. Remove the option (or set it to false)")
        isolation = _isolation(get("isolationLevel"))
        query_timeout = _int_option("queryTimeout", get("queryTimeout"), 0, minimum=0)
        column_types = parse_column_types(get("createTableColumnTypes") or "")
        commit_mode = cast(CommitMode, _choice("commitMode", get("commitMode"),
                                               ("auto", "prepared", "staging"), "auto"))
        if commit_mode == "prepared" and dialect in ("sqlite", "other"):
            what = "SQLite has no prepared transactions" if dialect == "sqlite" else (
                "twopc can prepare transactions only on PostgreSQL and MySQL/MariaDB")
            raise ConfigurationError(f"commitMode=prepared is not possible here: {what}; use "
                                     f"commitMode=staging (or auto)")
        save_mode_text = get("saveMode")
        save_mode: SaveMode | None = None
        if save_mode_text is not None:
            key = save_mode_text.strip().lower()
            if key not in _SAVE_MODES:
                raise ConfigurationError(
                    f"saveMode must be append, overwrite, errorifexists (or error, default) or "
                    f"ignore, got {save_mode_text!r}")
            save_mode = cast(SaveMode, _SAVE_MODES[key])
        copy_format = cast(CopyFormat, _choice("copyFormat", get("copyFormat"),
                                               ("auto", "binary", "csv"), "auto"))
        if copy_format != "auto" and dialect != "postgresql":
            raise ConfigurationError(
                f"copyFormat={copy_format} applies only to PostgreSQL (COPY); this URL is {dialect}: "
                f"remove the option")
        connect_timeout = _int_option("connectTimeout", get("connectTimeout"), url_timeout or 10, minimum=1)
        if connect_timeout > _MAX_CONNECT_TIMEOUT:
            source = "option connectTimeout" if get("connectTimeout") else "the connect timeout in the url"
            raise ConfigurationError(
                f"{source} is {connect_timeout} seconds; it must be between 1 and {_MAX_CONNECT_TIMEOUT} "
                f"(the option is in seconds; MySQL's JDBC URL parameter connectTimeout is in milliseconds)")
        marker = (get("markerTable") or "").strip() or "twopc_markers"
        staging_text = get("stagingTable")
        staging: str | None = None
        if staging_text is not None:
            staging = staging_text.strip()
            if not staging:
                raise ConfigurationError("stagingTable is empty: give a table name or leave the option out")
        session_init = get("sessionInitStatement")
        return cls(
            url=url,
            dialect=dialect,
            table=table,
            driver=driver,
            batch_size=batch_size,
            truncate=truncate,
            create_table_options=get("createTableOptions") or "",
            create_table_column_types=column_types,
            table_comment=get("tableComment") or "",
            isolation_level=isolation,
            query_timeout=query_timeout,
            session_init_statement=session_init if session_init and session_init.strip() else None,
            commit_mode=commit_mode,
            upsert_keys=tuple(parse_column_list(get("upsertKeys") or "", "upsertKeys")),
            save_mode=save_mode,
            marker_table=marker,
            staging_table=staging,
            lock_timeout=_lock_timeout(get("lockTimeout")),
            connect_timeout=connect_timeout,
            copy_format=copy_format,
        )

    # -- presentation ----------------------------------------------------------------------

    def safe_url(self) -> str:
        """The URL as a string with the password (and ``sslpassword``) replaced by ``***``."""
        url = self.url
        hidden = {k: "***" for k in url.query if k.lower() in _SECRET_QUERY_KEYS}
        if hidden:
            url = url.update_query_dict(hidden)
        return url.render_as_string(hide_password=True).replace("%2A%2A%2A", "***")

    def secrets(self) -> list[str]:
        """Every form (raw, URL-quoted) of the password and of other secret URL parameters,
        longest first, for :func:`twopc.redact`."""
        values: list[str | None] = [self.url.password]
        for k, v in self.url.query.items():
            if k.lower() in _SECRET_QUERY_KEYS:
                values.extend(v if isinstance(v, tuple) else (v,))
        return secret_forms(values)

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

    @property
    def lock_timeout_ms(self) -> int:
        """:attr:`lock_timeout` in milliseconds (rounded up; 0 = no limit in PostgreSQL)."""
        m = _LOCK_TIMEOUT.match(self.lock_timeout)
        if not m:  # only possible when constructed directly with a bad value
            raise ConfigurationError(f"lockTimeout {self.lock_timeout!r} is invalid: use e.g. 30s, 500ms, 2min")
        return math.ceil(float(m.group(1)) * _LOCK_UNITS_MS[m.group(2) or "ms"])


# -- simple options ------------------------------------------------------------------------

def _lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in options.items():
        lk = k.lower()
        if lk in out and out[lk] != v:
            raise ConfigurationError(f"option {k} is given twice (keys are case-insensitive) with different values")
        out[lk] = v
    return out


def _table_option(dbtable: str | None, table: str | None) -> str:
    if dbtable is not None and table is not None and dbtable.strip() != table.strip():
        raise ConfigurationError("options dbtable and table are both given, with different values: "
                                 "give only dbtable")
    text = (dbtable if dbtable is not None else table or "").strip()
    if not text:
        raise MissingOptionError('twopc-jdbc needs option "dbtable", e.g. .option("dbtable", "public.events")')
    if text.startswith("("):
        raise ConfigurationError(
            f"dbtable {text!r} is a subquery, which can only be read; a write needs a table name")
    return text


def _int_option(name: str, text: str | None, default: int, *, minimum: int) -> int:
    if text is None or not text.strip():
        return default
    t = text.strip()
    if not re.fullmatch(r"[+-]?\d+", t):
        raise ConfigurationError(f"{name} must be an integer >= {minimum}, got {text!r}")
    value = int(t)
    if value < minimum:
        raise ConfigurationError(f"{name} must be an integer >= {minimum}, got {value}")
    return value


def _bool_option(name: str, text: str | None, default: bool) -> bool:
    if text is None or not text.strip():
        return default
    t = text.strip().lower()
    if t not in ("true", "false"):
        raise ConfigurationError(f"{name} must be true or false, got {text!r}")
    return t == "true"


def _choice(name: str, text: str | None, allowed: tuple[str, ...], default: str) -> str:
    if text is None or not text.strip():
        return default
    t = text.strip().lower()
    if t not in allowed:
        raise ConfigurationError(f"{name} must be {', '.join(allowed[:-1])} or {allowed[-1]}, got {text!r}")
    return t


def _isolation(text: str | None) -> IsolationLevel:
    if text is None or not text.strip():
        return "READ_COMMITTED"
    t = text.strip().upper().replace(" ", "_")
    if t == "NONE":
        raise ConfigurationError(
            "isolationLevel=NONE is not supported: twopc needs transactions to write exactly once; "
            "use READ_COMMITTED (the default) or a stricter level")
    if t not in _ISOLATION_LEVELS:
        raise ConfigurationError(f"isolationLevel must be one of {', '.join(_ISOLATION_LEVELS)}, got {text!r}")
    return cast(IsolationLevel, t)


def _driver(text: str | None, dialect: Dialect) -> str | None:
    if text is None or not text.strip():
        return None
    t = text.strip()
    if not _JAVA_CLASS.match(t):
        raise ConfigurationError(
            f"driver {text!r} is not a Java class name (e.g. org.postgresql.Driver); twopc-jdbc "
            f"does not need it and only records it")
    expected = _KNOWN_DRIVERS.get(t.lower())
    if expected is not None and dialect != "other" and expected != dialect:
        raise ConfigurationError(f"driver {t} is a {expected} driver, but the url is a {dialect} URL")
    return t


def _lock_timeout(text: str | None) -> str:
    if text is None or not text.strip():
        return "30s"
    if not _LOCK_TIMEOUT.match(text):
        raise ConfigurationError(f"lockTimeout {text!r} is invalid: use e.g. 30s, 500ms, 2min")
    return text.replace(" ", "").replace("\t", "")


# -- column lists --------------------------------------------------------------------------

_UNQUOTED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPE_OUTSIDE_QUOTES = re.compile(r"[A-Za-z0-9_ \t\r\n(),.\[\]]")


def _read_name(text: str, i: int, what: str) -> tuple[str, int]:
    """Read a column name at *i*: ``name``, ```quoted` `` (doubled backtick escapes it)
    or ``"quoted"`` (doubled quote escapes it). Returns the name and the next index."""
    if i < len(text) and text[i] in "`\"":
        q = text[i]
        j, buf = i + 1, []
        while True:
            k = text.find(q, j)
            if k < 0:
                raise ConfigurationError(f"{what}: unterminated {q} quote in a column name")
            buf.append(text[j:k])
            if k + 1 < len(text) and text[k + 1] == q:
                buf.append(q)
                j = k + 2
                continue
            name = "".join(buf)
            if not name:
                raise ConfigurationError(f"{what}: empty quoted column name")
            if "\x00" in name:
                raise ConfigurationError(f"{what}: a column name cannot contain a NUL character")
            return name, k + 1
    m = _UNQUOTED_NAME.match(text, i)
    if not m:
        snippet = text[i:i + 20]
        raise ConfigurationError(
            f"{what}: expected a column name at {snippet!r}; quote names with spaces or special "
            f"characters in backticks, e.g. `my col`")
    return m.group(0), m.end()


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def parse_column_list(text: str, what: str = "upsertKeys") -> list[str]:
    """Parse ``a, "B c", `d``` into column names. Empty text gives ``[]``.

    Raises:
        ConfigurationError: syntax error or duplicate name (compared case-insensitively).
    """
    names: list[str] = []
    i = _skip_ws(text, 0)
    if i >= len(text):
        return names
    while True:
        name, i = _read_name(text, i, what)
        if name.lower() in (n.lower() for n in names):
            raise ConfigurationError(f"{what}: column {name!r} is listed twice")
        names.append(name)
        i = _skip_ws(text, i)
        if i >= len(text):
            return names
        if text[i] != ",":
            raise ConfigurationError(f"{what}: expected ',' after column {name!r}, got {text[i:i + 20]!r}")
        i = _skip_ws(text, i + 1)
        if i >= len(text):
            raise ConfigurationError(f"{what}: trailing comma (empty column name)")


def parse_column_types(text: str, what: str = "createTableColumnTypes") -> dict[str, str]:
    """Parse Spark's ``createTableColumnTypes``: ``"name VARCHAR(64), price DECIMAL(10,2)"``.

    Entries are ``column type`` separated by commas outside parentheses; a column name may
    be quoted with backticks or double quotes. The type is kept verbatim (stripped), so it
    must be safe to paste into DDL: letters, digits, ``_``, spaces, ``.``, ``[]``,
    balanced parentheses (commas only inside them) and balanced single-quoted literals
    (e.g. ``ENUM('a','b')``). Empty text gives ``{}``.

    Raises:
        ConfigurationError: syntax error, duplicate column (case-insensitive), or a type
            with ``;``, ``--``, ``/*``, ``*/``, unbalanced parentheses or quotes, or other
            characters that could end the type and inject SQL.
    """
    result: dict[str, str] = {}
    seen: set[str] = set()
    n = len(text)
    i = _skip_ws(text, 0)
    if i >= n:
        return result
    while True:
        if i >= n:
            raise ConfigurationError(f"{what}: trailing comma (empty entry)")
        quoted = text[i] in "`\""
        name, i = _read_name(text, i, what)
        if i < n and not text[i].isspace() and not quoted and text[i] != ",":
            raise ConfigurationError(
                f"{what}: column name {name + text[i:i + 10]!r}... has characters that need quoting; "
                f"quote it in backticks")
        start = i
        depth, in_quote = 0, False
        while i < n:
            c = text[i]
            if in_quote:
                if c == "'":
                    if i + 1 < n and text[i + 1] == "'":
                        i += 1
                    else:
                        in_quote = False
            elif c == "'":
                in_quote = True
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth < 0:
                    raise ConfigurationError(f"{what}: column {name!r}: unbalanced parentheses in its type")
            elif c == "," and depth == 0:
                break
            i += 1
        type_text = text[start:i].strip()
        _check_type(name, type_text, depth, in_quote, what)
        if name.lower() in seen:
            raise ConfigurationError(f"{what}: column {name!r} is listed twice")
        seen.add(name.lower())
        result[name] = type_text
        if i >= n:
            return result
        i = _skip_ws(text, i + 1)


def _check_type(name: str, type_text: str, depth: int, in_quote: bool, what: str) -> None:
    where = f"{what}: column {name!r}"
    if not type_text:
        raise ConfigurationError(f"{where} has no type (write `name TYPE`, e.g. `{name} VARCHAR(64)`)")
    for bad, label in ((";", "';'"), ("--", "'--' (SQL comment)"), ("/*", "'/*' (SQL comment)"),
                       ("*/", "'*/' (SQL comment)")):
        if bad in type_text:
            raise ConfigurationError(f"{where}: type {type_text!r} contains {label}, which is not allowed")
    if in_quote:
        raise ConfigurationError(f"{where}: type {type_text!r} has an unterminated ' quote")
    if depth != 0:
        raise ConfigurationError(f"{where}: type {type_text!r} has unbalanced parentheses")
    if not type_text[0].isascii() or not type_text[0].isalpha():
        raise ConfigurationError(f"{where}: type {type_text!r} must start with a letter")
    quote = False
    for c in type_text:
        if c == "'":
            quote = not quote  # a doubled '' toggles twice
            continue
        if quote:
            if c == "\\" or (not c.isprintable() and c != " "):
                raise ConfigurationError(f"{where}: type {type_text!r}: character {c!r} is not allowed "
                                         f"in a quoted literal")
        elif not _TYPE_OUTSIDE_QUOTES.match(c):
            raise ConfigurationError(f"{where}: type {type_text!r}: character {c!r} is not allowed in a "
                                     f"column type")


# -- URLs -----------------------------------------------------------------------------------

_SECRET_QUERY_KEYS = frozenset({"password", "sslpassword", "passwd"})


class _Prop(NamedTuple):
    """One driver parameter: from the JDBC URL's query string or an extra option."""

    key: str  # lower case
    name: str  # as written
    value: str
    source: str  # "the JDBC URL" or "option"


class _Translated(NamedTuple):
    query: dict[str, str | tuple[str, ...]]
    connect_timeout: int | None


class _JdbcParts(NamedTuple):
    subprotocol: str  # postgresql | mysql | mariadb | sqlite
    user: str | None
    password: str | None
    hosts: list[str]
    database: str | None
    params: list[tuple[str, str]]


def _build_url(raw: str, option_props: list[tuple[str, str]], user: str | None,
               password: str | None) -> tuple[URL, Dialect, int | None]:
    """Return the SQLAlchemy URL (credentials set, parameters translated), the dialect and
    the connect timeout in seconds found among the parameters (None if none)."""
    props: dict[str, _Prop] = {}
    base_query: dict[str, str | tuple[str, ...]] = {}

    def add(key: str, value: str, source: str) -> None:
        lk = key.lower()
        old = props.get(lk)
        if old is not None and old.value != value:
            where = "twice in the JDBC URL" if old.source == source else f"in {old.source} and as {source}"
            raise ConfigurationError(f"parameter {key} is given {where}, with different values: give it once")
        props[lk] = _Prop(lk, key, value, source)

    if raw.lower().startswith("jdbc:"):
        parts = _split_jdbc(raw)
        for k, v in parts.params:
            add(k, v, "the JDBC URL")
        url_user, url_password = parts.user, parts.password
        if parts.subprotocol == "postgresql":
            dialect: Dialect = "postgresql"
            host, port, multi = _pg_hosts(parts.hosts)
            if multi:
                base_query["host"] = tuple(multi)
            url = URL.create("postgresql+psycopg", host=host, port=port, database=parts.database)
        elif parts.subprotocol in ("mysql", "mariadb"):
            dialect = "mysql"
            if len(parts.hosts) > 1:
                raise ConfigurationError(
                    "the JDBC URL names several hosts; PyMySQL connects to one: give a single "
                    "host[:port]")
            host, port = _host_port(parts.hosts[0]) if parts.hosts else ("localhost", None)
            url = URL.create("mysql+pymysql", host=host, port=port, database=parts.database)
        else:
            dialect = "sqlite"
            url = URL.create("sqlite", database=parts.database)
        flavor = parts.subprotocol
    else:
        try:
            url = make_url(raw)
        except Exception:  # ArgumentError, ValueError (bad port), ...; the text may hold the password
            raise ConfigurationError(
                "url is neither a JDBC URL (jdbc:postgresql://host:port/db, jdbc:mysql://..., "
                "jdbc:mariadb://..., jdbc:sqlite:/path/file.db) nor a valid SQLAlchemy URL "
                "(postgresql://user@host:port/db, mysql://..., sqlite:////abs/path.db)") from None
        url, dialect = _normalize_sqlalchemy(url)
        url_user, url_password = url.username, url.password
        flavor = "mysql" if dialect == "mysql" else dialect
        base_query = dict(url.query)
        for key in list(base_query):  # credentials in the query string would show in describe()
            if key.lower() in ("user", "password"):
                value = base_query.pop(key)
                text = value[-1] if isinstance(value, tuple) else value
                if key.lower() == "user":
                    url_user = text
                else:
                    url_password = text
        url = url.set(query={})

    for k, v in option_props:
        add(k, v, "option")
    for cred in ("user", "password"):
        prop = props.pop(cred, None)
        if prop is not None:
            if cred == "user":
                url_user = prop.value
            else:
                url_password = prop.value

    if dialect == "postgresql":
        translated = _translate_pg(list(props.values()), base_query)
    elif dialect == "mysql":
        translated = _translate_mysql(list(props.values()), flavor)
    elif dialect == "sqlite":
        translated = _translate_sqlite(list(props.values()))
    else:
        if props:
            names = ", ".join(p.name for p in props.values())
            raise ConfigurationError(
                f"option(s) {names} are not twopc-jdbc or Spark JDBC options, and driver "
                f"parameters are only translated for PostgreSQL, MySQL/MariaDB and SQLite: put "
                f"them in the SQLAlchemy URL's query string in your driver's own spelling. "
                f"{_supported_options_text()}")
        translated = _Translated({}, None)

    query = dict(base_query)
    for k, value in translated.query.items():
        if k == "options" and k in query:  # merged by _translate_pg
            query[k] = value
            continue
        if k in query and query[k] != value:
            raise ConfigurationError(
                f"driver parameter {k} is set in the url and, differently, by a JDBC "
                f"parameter or option: give it once")
        query[k] = value
    url = url.set(query=query)

    if user is not None:
        url_user = user
    if password is not None:
        url_password = password
    if dialect == "sqlite":
        if url_user or url_password:
            log.info("twopc-jdbc: SQLite has no login; ignoring user/password")
        url = url.set(username=None, password=None)
        _check_sqlite_durable(url)
    else:
        # a password without a user keeps username "" so that the rendered URL keeps it too
        # (SQLAlchemy drops the password of a URL without username when rendering)
        username = url_user if url_user else ("" if url_password else None)
        url = url.set(username=username, password=url_password)
    return url, dialect, translated.connect_timeout


def _normalize_sqlalchemy(url: URL) -> tuple[URL, Dialect]:
    backend, _, driver = url.drivername.partition("+")
    backend = backend.lower()
    driver = driver.lower()
    if backend in ("postgresql", "postgres"):
        if driver not in ("", "psycopg", "psycopg2", "psycopg2cffi"):
            raise ConfigurationError(
                f"twopc-jdbc connects to PostgreSQL with psycopg 3, not {driver}: use a "
                f"postgresql:// or postgresql+psycopg:// URL")
        return url.set(drivername="postgresql+psycopg"), "postgresql"
    if backend in ("mysql", "mariadb"):
        if driver not in ("", "pymysql", "mysqldb"):
            raise ConfigurationError(
                f"twopc-jdbc connects to MySQL/MariaDB with PyMySQL, not {driver}: use a mysql:// "
                f"or mysql+pymysql:// URL")
        return url.set(drivername="mysql+pymysql"), "mysql"
    if backend == "sqlite":
        if driver not in ("", "pysqlite"):
            raise ConfigurationError(
                f"twopc-jdbc uses Python's sqlite3 for SQLite, not {driver}: use a sqlite:/// URL")
        return url.set(drivername="sqlite"), "sqlite"
    return url, "other"


def _check_sqlite_durable(url: URL) -> None:
    db = (url.database or "").strip()
    mode = url.query.get("mode")
    if (not db or db == ":memory:" or db.startswith("file::memory:") or mode == "memory"
            or (isinstance(mode, tuple) and "memory" in mode)):
        raise ConfigurationError(
            "an in-memory SQLite database cannot be used: twopc stages data and records commit "
            "markers that must survive the connection; give a file, e.g. jdbc:sqlite:/data/app.db "
            "or sqlite:////data/app.db")


def _split_jdbc(raw: str) -> _JdbcParts:
    body = raw[len("jdbc:"):]
    sub, sep, rest = body.partition(":")
    sub = sub.lower()
    if not sep or sub not in ("postgresql", "mysql", "mariadb", "sqlite"):
        shown = sub if re.fullmatch(r"[a-z0-9+._-]{1,30}", sub) else "?"
        raise ConfigurationError(
            f"JDBC subprotocol {shown!r} is not supported: twopc-jdbc translates jdbc:postgresql:, "
            f"jdbc:mysql:, jdbc:mariadb: and jdbc:sqlite: URLs. For another database give a "
            f"SQLAlchemy URL instead (e.g. mssql+pyodbc://..., oracle+oracledb://...); "
            f"commitMode=staging may work there")
    if sub == "sqlite":
        return _split_sqlite(rest)
    path, _, query_text = rest.partition("?")
    if sub == "postgresql":
        if path.startswith("//"):
            netloc, _, dbpath = path[2:].partition("/")
        else:  # jdbc:postgresql:database  or  jdbc:postgresql:/
            netloc, dbpath = "", path.lstrip("/")
    else:
        if not path.startswith("//"):
            raise ConfigurationError(
                f"this jdbc:{sub}: URL form is not supported: twopc-jdbc translates "
                f"jdbc:{sub}://host[:port]/database (no load-balancing, replication or failover "
                f"variants); give a SQLAlchemy URL mysql+pymysql://host:port/db instead")
        netloc, _, dbpath = path[2:].partition("/")
    user = password = None
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        u, colon, p = userinfo.partition(":")
        user = urllib.parse.unquote(u) or None
        password = urllib.parse.unquote(p) if colon else None
    hosts = [h.strip() for h in netloc.split(",") if h.strip()]
    if sub != "postgresql" and any("(" in h or "=" in h for h in hosts):
        raise ConfigurationError(
            "the JDBC URL uses the address=(host=...)(port=...) host syntax, which twopc-jdbc does not "
            "translate: write host[:port]")
    database = urllib.parse.unquote(dbpath) or None
    params = _query_params(query_text)
    return _JdbcParts(sub, user, password, hosts, database, params)


def _split_sqlite(rest: str) -> _JdbcParts:
    path, _, query_text = rest.partition("?")
    if path.lower().startswith("file:"):
        path = path[len("file:"):]
        if path.startswith("//"):
            host, slash, tail = path[2:].partition("/")
            if host not in ("", "localhost"):
                raise ConfigurationError("a file: SQLite URI with a host name is not supported: give a local path")
            path = slash + tail
    if not path or path == ":memory:" or path.startswith(":memory:") or path.startswith(":resource:"):
        if path.startswith(":resource:"):
            raise ConfigurationError("a SQLite database in a Java resource is read-only: give a file path, "
                                     "e.g. jdbc:sqlite:/data/app.db")
        raise ConfigurationError(
            "an in-memory SQLite database cannot be used: twopc stages data and records commit markers "
            "that must survive the connection; give a file, e.g. jdbc:sqlite:/data/app.db")
    return _JdbcParts("sqlite", None, None, [], path, _query_params(query_text))


def _query_params(query_text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for piece in query_text.split("&"):
        if not piece:
            continue
        k, _, v = piece.partition("=")
        key = urllib.parse.unquote_plus(k).strip()
        if not key:
            raise ConfigurationError("the JDBC URL has a parameter without a name")
        out.append((key, urllib.parse.unquote_plus(v)))
    return out


def _host_port(h: str) -> tuple[str, int | None]:
    port_text = ""
    if h.startswith("["):  # [ipv6]:port
        addr, _, tail = h[1:].partition("]")
        host, port_text = addr, tail.lstrip(":")
    elif h.count(":") == 1:
        host, port_text = h.split(":")
    else:
        host = h
    if not host:
        raise ConfigurationError("the JDBC URL has an empty host name")
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigurationError("invalid port in the JDBC URL: use host:port with a number 1-65535")
        return host, int(port_text)
    return host, None


def _pg_hosts(hosts: list[str]) -> tuple[str | None, int | None, list[str]]:
    """Single host -> (host, port, []); several -> (None, None, ["h:p", ...]) for
    SQLAlchemy's multi-host ``?host=`` syntax; none -> localhost like pgjdbc."""
    if not hosts:
        return "localhost", None, []
    parsed = [_host_port(h) for h in hosts]
    if len(parsed) == 1:
        return parsed[0][0], parsed[0][1], []
    multi = []
    for host, port in parsed:
        h = f"[{host}]" if ":" in host else host
        multi.append(f"{h}:{port}" if port else h)
    return None, None, multi


# -- driver parameters -------------------------------------------------------------------------

def _supported_options_text() -> str:
    return f"Supported options: {', '.join(SPARK_OPTIONS + TWOPC_OPTIONS)}"


def _unknown(prop: _Prop, dialect_label: str, mapped: tuple[str, ...],
             java_only: tuple[str, ...]) -> ConfigurationError:
    if prop.source == "the JDBC URL":
        head = f"parameter {prop.name} in the JDBC URL is not supported for {dialect_label}"
        tail = ""
    else:
        head = (f"option {prop.name} is neither a Spark JDBC nor a twopc option, nor a {dialect_label} "
                f"driver parameter twopc-jdbc knows (Spark passes unknown options to the JDBC driver)")
        tail = f" {_supported_options_text()}."
    accepted = f"; accepted without effect (Java driver tuning): {', '.join(java_only)}" if java_only else ""
    return ConfigurationError(
        f"{head}. Driver parameters translated for {dialect_label}: {', '.join(mapped)}{accepted}.{tail} "
        f"Remove it, or give a SQLAlchemy URL with the Python driver's own parameters")


def _java_only(prop: _Prop, dialect_label: str) -> None:
    log.info("twopc-jdbc: %s %s=%s only tunes the Java %s JDBC driver; it has no effect here",
             "URL parameter" if prop.source == "the JDBC URL" else "option", prop.name,
             prop.value if prop.key not in _SECRET_QUERY_KEYS else "***", dialect_label)


def _seconds(prop: _Prop, unit_ms: bool) -> int | None:
    """A JDBC timeout in seconds (rounded up); None for 0 (= no limit in JDBC)."""
    t = prop.value.strip()
    if not t.isdigit():
        unit = "milliseconds" if unit_ms else "seconds"
        raise ConfigurationError(f"{prop.name} must be a whole number of {unit}, got {prop.value!r}")
    n = int(t)
    if n == 0:
        return None
    return max(1, math.ceil(n / 1000)) if unit_ms else n


def _jdbc_bool(prop: _Prop) -> bool:
    t = prop.value.strip().lower()
    if t in ("true", "", "1", "yes"):
        return True
    if t in ("false", "0", "no"):
        return False
    raise ConfigurationError(f"{prop.name} must be true or false, got {prop.value!r}")


def _libpq_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(" ", "\\ ")


def _translate_pg(props: list[_Prop], base_query: Mapping[str, str | tuple[str, ...]]) -> _Translated:
    q: dict[str, str | tuple[str, ...]] = {}
    timeout: int | None = None
    login_timeout: int | None = None
    ssl_flag = False
    zero_timeout = False
    schema: str | None = None
    for p in props:
        k, v = p.key, p.value
        if k == "ssl":
            t = v.strip().lower()
            if t not in ("", "true", "false"):
                raise ConfigurationError(f"ssl must be true or false, got {v!r}")
            ssl_flag = t != "false"
        elif k == "sslmode":
            t = v.strip().lower()
            if t not in _PG_SSLMODES:
                raise ConfigurationError(f"sslmode must be one of {', '.join(_PG_SSLMODES)}, got {v!r}")
            q["sslmode"] = t
        elif k in ("sslrootcert", "sslcert", "sslkey", "sslpassword"):
            if k == "sslkey" and v.lower().endswith((".pk8", ".der")):
                log.info("twopc-jdbc: sslkey %s looks like a PKCS-8 DER key (pgjdbc's format); libpq "
                         "needs the key as PEM", v)
            q[k] = v
        elif k == "applicationname":
            q["application_name"] = v
        elif k in ("connecttimeout", "logintimeout"):
            sec = _seconds(p, unit_ms=False)
            zero_timeout = zero_timeout or sec is None
            if k == "connecttimeout":
                timeout = sec
            else:
                login_timeout = sec
        elif k == "currentschema":
            if not v.strip():
                raise ConfigurationError("currentSchema is empty")
            schema = v.strip()
        elif k == "options":
            base = base_query.get("options")
            if base is not None and base != v:
                raise ConfigurationError("driver parameter options is set in the url and, differently, "
                                         "by a JDBC parameter or option: give it once")
            q["options"] = v
        elif k == "targetservertype":
            t = v.strip().lower()
            if t == "any":
                q["target_session_attrs"] = "any"
            elif t in ("primary", "master", "preferprimary"):
                q["target_session_attrs"] = "read-write"
            elif t in ("secondary", "slave", "prefersecondary", "preferslave", "standby", "preferstandby"):
                raise ConfigurationError(
                    f"targetServerType={v} would connect to a standby, which cannot be written; use "
                    f"targetServerType=primary")
            else:
                raise ConfigurationError(f"targetServerType must be any or primary, got {v!r}")
        elif k == "gssencmode":
            t = v.strip().lower()
            if t not in ("disable", "allow", "prefer", "require"):
                raise ConfigurationError(f"gssEncMode must be disable, allow, prefer or require, got {v!r}")
            q["gssencmode"] = t
        elif k == "channelbinding":
            t = v.strip().lower()
            if t not in ("disable", "prefer", "require"):
                raise ConfigurationError(f"channelBinding must be disable, prefer or require, got {v!r}")
            q["channel_binding"] = t
        elif k == "loadbalancehosts":
            q["load_balance_hosts"] = "random" if _jdbc_bool(p) else "disable"
        elif k in _PG_JAVA_ONLY:
            _java_only(p, "PostgreSQL")
        elif k in _PG_REFUSED:
            raise ConfigurationError(f"{_param_label(p)} is not supported: it {_PG_REFUSED[k]}")
        else:
            raise _unknown(p, "PostgreSQL", PG_PARAMETERS, PG_JAVA_ONLY)
    if ssl_flag and "sslmode" not in q and "sslmode" not in base_query:
        # pgjdbc: ssl=true without sslmode verifies the certificate and the host name
        q["sslmode"] = "verify-full"
        log.info("twopc-jdbc: ssl=true means sslmode=verify-full (as in pgjdbc)")
    if schema is not None:
        existing = q.get("options", base_query.get("options", ""))
        existing_text = existing[-1] if isinstance(existing, tuple) else existing
        search = f"-csearch_path={_libpq_escape(schema)}"
        q["options"] = f"{existing_text} {search}".strip()
    if zero_timeout and timeout is None and login_timeout is None:
        log.info("twopc-jdbc: a connect timeout of 0 (no limit) is not supported; using the "
                 "connectTimeout option (default 10 s)")
    return _Translated(q, timeout if timeout is not None else login_timeout)


def _param_label(p: _Prop) -> str:
    return f"parameter {p.name} in the JDBC URL" if p.source == "the JDBC URL" else f"option {p.name}"


def _translate_mysql(props: list[_Prop], flavor: str) -> _Translated:
    q: dict[str, str | tuple[str, ...]] = {}
    timeout: int | None = None
    by_key = {p.key: p for p in props}
    for p in props:
        k, v = p.key, p.value
        if k in _MYSQL_TLS_KEYS:
            continue
        if k == "connecttimeout":
            sec = _seconds(p, unit_ms=True)
            if sec is None:
                log.info("twopc-jdbc: connectTimeout=0 (no limit) is not supported; using the "
                         "connectTimeout option (default 10 s)")
            timeout = sec
        elif k == "sockettimeout":
            sec = _seconds(p, unit_ms=True)
            if sec is not None:
                q["read_timeout"] = str(sec)
                q["write_timeout"] = str(sec)
        elif k == "characterencoding":
            if v.strip().lower() not in _UTF8_NAMES:
                raise ConfigurationError(
                    f"characterEncoding={v} is not supported: twopc-jdbc writes UTF-8 (charset "
                    f"utf8mb4); use characterEncoding=UTF-8 or remove it")
            q["charset"] = "utf8mb4"
        elif k in ("servertimezone", "connectiontimezone"):
            if v.strip().lower() not in _UTC_NAMES:
                raise ConfigurationError(
                    f"{p.name}={v} is not supported: twopc-jdbc sends timestamps as UTC; use "
                    f"{p.name}=UTC or remove it")
            log.info("twopc-jdbc: %s=%s: timestamps are written in UTC", p.name, v)
        elif k in _MYSQL_JAVA_ONLY:
            _java_only(p, "MySQL/MariaDB")
        elif k in _MYSQL_REFUSED:
            raise ConfigurationError(f"{_param_label(p)} is not supported: it {_MYSQL_REFUSED[k]}")
        else:
            raise _unknown(p, "MySQL/MariaDB", MYSQL_PARAMETERS, MYSQL_JAVA_ONLY)
    q.update(_mysql_tls(by_key, flavor))
    return _Translated(q, timeout)


def _mysql_tls(by_key: Mapping[str, _Prop], flavor: str) -> dict[str, str | tuple[str, ...]]:
    """Map Connector/J / MariaDB Connector/J TLS parameters to PyMySQL's ``ssl_*`` URL
    parameters (read by SQLAlchemy's mysql dialect). Never weakens what was asked for;
    every TLS parameter that ends up without effect is logged at INFO."""
    used: set[str] = set()

    def flag(key: str) -> bool | None:
        p = by_key.get(key)
        if p is None:
            return None
        used.add(key)
        return _jdbc_bool(p)

    ca_prop = by_key.get("serversslcert")
    ca: str | None = None
    if ca_prop is not None:
        ca = ca_prop.value.strip()
        if not ca or ca.startswith("-----BEGIN") or ca.lower().startswith("classpath:"):
            raise ConfigurationError(
                "serverSslCert must be the path of a PEM file with the CA certificate (inline "
                "certificates and classpath: resources are not supported)")
    mode_prop = by_key.get("sslmode")
    mode: str | None
    if mode_prop is not None:
        used.add("sslmode")
        key = mode_prop.value.strip().lower()
        if key not in _MYSQL_SSLMODES:
            raise ConfigurationError(
                f"sslMode must be DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY (MariaDB: "
                f"disable, trust, verify-ca, verify-full), got {mode_prop.value!r}")
        mode = _MYSQL_SSLMODES[key]
    elif flavor == "mariadb":  # MariaDB Connector/J 2.x: useSsl verifies unless told not to
        use = flag("usessl")
        if use:
            if flag("trustservercertificate"):
                mode = "required"
            elif flag("disablesslhostnameverification"):
                mode = "verify_ca"
            else:
                mode = "verify_identity"
        else:
            mode = "disabled" if use is False else None
    else:  # MySQL Connector/J: useSSL=true alone is PREFERRED
        use, require, verify = flag("usessl"), flag("requiressl"), flag("verifyservercertificate")
        if use is False:
            mode = "disabled"
        elif verify:
            mode = "verify_ca"
        elif require:
            mode = "required"
        elif use:
            mode = "preferred"
        else:
            mode = None
    if mode in ("preferred", "required") and flag("verifyservercertificate"):
        mode = "verify_ca"  # stricter of the two
    q: dict[str, str | tuple[str, ...]] = {}
    if mode in ("preferred", "required"):
        if mode == "preferred":
            log.info("twopc-jdbc: PyMySQL has no opportunistic TLS: TLS is required (without "
                     "certificate verification), as with sslMode=REQUIRED")
        q["ssl_check_hostname"] = "false"
        if ca is not None:
            used.add("serversslcert")
            q["ssl_ca"] = ca
            log.info("twopc-jdbc: serverSslCert given: the server certificate is verified")
    elif mode in ("verify_ca", "verify_identity"):
        if ca is None:
            raise ConfigurationError(
                f"TLS with certificate verification "
                f"({'VERIFY_CA' if mode == 'verify_ca' else 'VERIFY_IDENTITY'}) needs the CA certificate "
                f"as a PEM file, because PyMySQL cannot read Java trust stores: add "
                f"serverSslCert=/path/ca.pem to the URL, or give a SQLAlchemy URL "
                f"mysql+pymysql://...?ssl_ca=/path/ca.pem")
        used.add("serversslcert")
        q["ssl_ca"] = ca
        if mode == "verify_ca":
            q["ssl_check_hostname"] = "false"
    for key, p in by_key.items():
        if key in _MYSQL_TLS_KEYS and key not in used:
            log.info("twopc-jdbc: %s=%s has no effect with the other TLS parameters given (TLS: %s)",
                     p.name, p.value, (mode or "not requested").replace("_", " "))
    return q


def _translate_sqlite(props: list[_Prop]) -> _Translated:
    q: dict[str, str | tuple[str, ...]] = {}
    for p in props:
        if p.key == "busy_timeout":
            t = p.value.strip()
            if not t.isdigit():
                raise ConfigurationError(f"busy_timeout must be a whole number of milliseconds, got {p.value!r}")
            q["timeout"] = f"{int(t) / 1000:g}"
        else:
            raise _unknown(p, "SQLite", SQLITE_PARAMETERS, ())
    return _Translated(q, None)


# -- secrets ----------------------------------------------------------------------------------

def secret_forms(values: Iterable[str | None]) -> list[str]:
    """Every spelling of these secrets that may reach a message (raw, URL-quoted, as
    SQLAlchemy renders it), longest first, for :func:`twopc.redact`."""
    forms: set[str] = set()
    for v in values:
        if not v:
            continue
        forms.update({v, urllib.parse.quote(v, safe=""), urllib.parse.quote_plus(v)})
        rendered = URL.create("x", username="u", password=v, host="h").render_as_string(hide_password=False)
        forms.add(rendered[len("x://u:"):-len("@h")])
    return sorted((f for f in forms if f), key=len, reverse=True)


_SECRET_IN_URL = re.compile(r"(?:^|[?&;])(?:ssl)?passw(?:or)?d=([^&;#]*)", re.IGNORECASE)
_USERINFO_IN_URL = (re.compile(r"//([^/?#]*)@"), re.compile(r"//([^/?#@]*)@"))


def _secret_guesses(options: Mapping[str, str]) -> list[str]:
    """Every value that may be a password, found before parsing, so that no error message
    built from the options can show it (also when parsing fails half-way)."""
    values: list[str | None] = []
    for k, v in options.items():
        if k.lower() in ("password", "sslpassword", "passwd") and isinstance(v, str):
            values.append(v)
        if k.lower() == "url" and isinstance(v, str):
            for m in _SECRET_IN_URL.finditer(v):
                values += [m.group(1), urllib.parse.unquote_plus(m.group(1))]
            for pattern in _USERINFO_IN_URL:  # up to the last and to the first '@'
                for m in pattern.finditer(v):
                    _, colon, pw = m.group(1).partition(":")
                    if colon:
                        values += [pw, urllib.parse.unquote(pw)]
    return secret_forms(values)
