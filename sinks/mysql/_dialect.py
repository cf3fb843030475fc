"""MariaDB/MySQL as the shared SQL layer sees it (:class:`MySqlDialect`, found through the
``twopc.sql_dialects`` entry points), importable without PyMySQL; its XA transactions are
:class:`twopc.sinks.mysql._prepared.MySqlPrepared`."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import URL

from twopc import ConfigurationError
from twopc.spi import TargetConfigurationError

from .._options import Duration
from ..sql._names import sql_literal
from ..sql._registry import DriverBound, SqlDatabase

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.types import TypeEngine

    from ..sql._privileges import Run
    from ..sql.options import NetTimeouts
    from ..sql.options._driver_params import DriverParam, Translated
    from ..sql.options._jdbc_url import JdbcParts

__all__ = ["MySqlDialect", "lease_name", "lock_seconds"]

def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def lease_name(sink_id: str, database: str) -> str:
    """The ``GET_LOCK`` name of *sink_id*'s lease in *database* (``GET_LOCK`` names are server-wide)."""
    return "twopc:" + hashlib.sha256(f"twopc-lease:{database}/{sink_id}".encode()).hexdigest()[:40]


_INT_WIDTH = re.compile(r"\b(tinyint|smallint|mediumint|int|integer|bigint)\(\d+\)")
_TYPE_ALIASES = {"bool": "tinyint", "boolean": "tinyint"}  # MySQL's BOOL is TINYINT(1)

#: MariaDB's and MySQL's longest identifier
NAME_CHARS = 64


def lock_seconds(timeout: Duration) -> int:
    """``innodb_lock_wait_timeout`` for *timeout*: whole seconds, rounded up, at least 1."""
    return max(1, timeout.whole_seconds)


class MySqlDialect(SqlDatabase):
    """MariaDB/MySQL: names, quoting, SQL texts, flags and driver rules."""

    name = "mysql"
    format_name = "MySqlXaSink"
    product = "MariaDB/MySQL"
    id_name = "XA transaction id"
    max_id_bytes = 64  # gtrid of an XA xid (MariaDB and MySQL)
    unique_violations = frozenset({"1062"})  # ER_DUP_ENTRY
    driver_error = DriverBound[type[Exception]]("pymysql:Error")
    dbapi = "pymysql"
    extra = "mysql"
    prepares = True
    shown_plain = re.compile(r"^(?!\d+$)[A-Za-z0-9_$]+$")
    name_quotes = "`"
    twopc_schemas = True
    checks_privileges = True

    @classmethod
    def ensure_schema(cls, run: Run, schema: str, database: str) -> None:
        from ..sql._privileges import denied  # the plan's: workers create no database
        if run(f"SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = {sql_literal(schema)}"):
            return
        q = _quoted(schema)
        try:
            run(f"CREATE DATABASE IF NOT EXISTS {q}")
        except Exception as exc:
            if not denied(exc):
                raise
            user = cls.current_user(run)
            raise TargetConfigurationError(
                f"twopcSchema {schema} (a database) does not exist or is not visible to the user {user}, who may "
                f"not create it: run as an administrator: CREATE DATABASE IF NOT EXISTS {q}; GRANT SELECT, INSERT, "
                f"UPDATE, DELETE, CREATE, DROP, INDEX ON {q}.* TO {user}; then write again. Validation stopped before "
                f"any task: nothing was written") from None

    transactional_ddl = False
    table_comments = "create"
    stages_in_table_types = True
    arrow_types: ClassVar[Mapping[str, TypeEngine[Any]]] = {
        "float32": mysql.FLOAT(), "float64": mysql.DOUBLE(), "string": mysql.LONGTEXT(), "binary": mysql.LONGBLOB(),
        "timestamp": mysql.DATETIME(fsp=6)}

    @staticmethod
    def normalize_type(ddl: str) -> str:
        """Without display widths (MariaDB's ``bigint(20)``); BOOL as the TINYINT it is."""
        t = _INT_WIDTH.sub(r"\1", ddl.lower().replace(" ", ""))
        return _TYPE_ALIASES.get(t, t)

    jdbc_subprotocols = frozenset({"mysql", "mariadb"})

    @staticmethod
    def jdbc_url(parts: JdbcParts) -> tuple[URL, dict[str, str | tuple[str, ...]]]:
        """PyMySQL's URL, of one host."""
        if len(parts.hosts) > 1:
            raise ConfigurationError(
                "the JDBC URL names several hosts; PyMySQL connects to one: give a single host[:port]")
        from ..sql.options._jdbc_url import host_port  # reading a URL: the driver's, at planning
        host, port = host_port(parts.hosts[0]) if parts.hosts else ("localhost", None)
        return URL.create("mysql+pymysql", host=host, port=port, database=parts.database), {}

    @staticmethod
    def sqlalchemy_url(url: URL, driver: str) -> URL:
        if driver not in ("", "pymysql", "mysqldb"):
            raise ConfigurationError(
                f"twopc connects to MySQL/MariaDB with PyMySQL, not {driver}: use a mysql:// or mysql+pymysql:// URL")
        return url.set(drivername="mysql+pymysql")

    @staticmethod
    def translate_params(props: Sequence[DriverParam], base_query: Mapping[str, str | tuple[str, ...]], flavor: str,
                         supported: Sequence[str]) -> Translated:
        from ..sql.options._driver_params import translate_mysql  # as in jdbc_url
        return translate_mysql(list(props), flavor == "mariadb", supported)

    @staticmethod
    def upsert_sql(into: str, select: str, source: str, q: Callable[[str], str], keys: Sequence[str],
                   others: Sequence[str], stage_keys: Sequence[str]) -> str | None:
        sets = ", ".join(f"{q(c)} = VALUES({q(c)})" for c in (others or keys[:1]))
        return f"{into} SELECT {select} {source} ON DUPLICATE KEY UPDATE {sets}"

    ledger_ddl = ("CREATE TABLE IF NOT EXISTS {table} (`sink_id` VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin "
                  "NOT NULL, `name` VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, `body` LONGTEXT NOT "
                  "NULL, `written_at` TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), PRIMARY KEY (`sink_id`, "
                  "`name`)) ENGINE=InnoDB")
    ledger_upsert = ("INSERT INTO {table} (sink_id, name, body) VALUES (%s, %s, %s) "
                     "ON DUPLICATE KEY UPDATE body = VALUES(body)")
    session_id_sql = "SELECT CONNECTION_ID()"
    server_identity_sql = "SELECT @@hostname, CAST(@@port AS CHAR), @@datadir"

    @staticmethod
    def lease_sql(sink_id: str, database: str) -> tuple[str, str, Any]:
        return "SELECT GET_LOCK(%s, 0)", "SELECT RELEASE_LOCK(%s)", lease_name(sink_id, database)

    @staticmethod
    def lease_holder_sql(key: Any, session: int) -> tuple[str, tuple[Any, ...]]:
        return "SELECT IS_USED_LOCK(%s) = %s", (key, session)

    @staticmethod
    def server_identity(row: Sequence[Any], table: str) -> str:
        return f"mysql server {row[0]}:{row[1]} datadir {row[2]} table {table}"

    @staticmethod
    def current_user(run: Run) -> str:
        """``'user'@'host'``, as a ``GRANT`` names it."""
        rows = run("SELECT CURRENT_USER()")
        name, _, host = (str(rows[0][0]) if rows else "<user>@%").rpartition("@")
        return f"'{name}'@'{host}'"

    @staticmethod
    def bookkeeping_name(name: str, schema: str, database: str) -> str:
        """*name* + ``_<8 hex of *database*>``: *schema*'s database serves every database of the server."""
        named = f"{name}_{hashlib.sha256(database.encode()).hexdigest()[:8]}"
        if len(named) > NAME_CHARS:
            raise ConfigurationError(
                f"the table {name!r} in twopcSchema {schema} would be named {named!r}, {len(named)} "
                f"characters; MySQL/MariaDB names are at most {NAME_CHARS}: use a shorter name")
        return named

    @staticmethod
    def name_too_long(part: str) -> str | None:
        return None if len(part) <= NAME_CHARS else (
            f"{len(part)} characters; MySQL/MariaDB identifiers are at most {NAME_CHARS}")
    label = "MySQL/MariaDB"
    default_port = 3306
    schema_is_database = True
    errors_module = "twopc.sinks.mysql._errors"
    staging_values = DriverBound[Any]("twopc.sinks.mysql._values:staging_values")
    #: needs pyarrow, which a worker that only commits never loads
    compatible = DriverBound[Any]("twopc.sinks.mysql._values:compatible")

    @staticmethod
    def server_lock_wait(lock: Duration) -> Duration:
        return Duration(lock_seconds(lock) * 1000)

    @staticmethod
    def lock_timeout_text(timeout: Duration) -> str:
        return f"{lock_seconds(timeout)}s"

    @staticmethod
    def connect_args(url: URL, timeouts: NetTimeouts) -> dict[str, Any]:
        """PyMySQL's connect arguments: timeouts (``socketTimeout`` for reads and writes), utf8mb4
        unless the URL names a charset, the password as UTF-8 bytes (PyMySQL would send Latin-1)."""
        args: dict[str, Any] = {"connect_timeout": timeouts.connect, "read_timeout": timeouts.reply,
                                "write_timeout": timeouts.reply}
        if "charset" not in url.query:
            args["charset"] = "utf8mb4"
        if url.password:
            args["password"] = url.password.encode("utf-8")
        return args

    @staticmethod
    def prepare_engine(engine: Engine, timeouts: NetTimeouts) -> None:
        """Set twopc's TCP keepalive on each new connection's socket (PyMySQL's waits 2 h)."""

        @sa.event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            timeouts.tune_socket(getattr(dbapi_conn, "_sock", None))

    session_statements = DriverBound[Any]("twopc.sinks.mysql._server:session_settings")
    catalog_columns = DriverBound[Any]("twopc.sinks.mysql._server:catalog_columns")
    rollback_problem = DriverBound[Any]("twopc.sinks.mysql._server:table_rollback_problem")
    sink_class = DriverBound[Any]("twopc.sinks.mysql:MySqlXaSink")

    @classmethod
    def prepare_capacity(cls, conn: Connection, sink: Any) -> tuple[bool, str]:
        ok, why = sink.dialect.xa_available()
        return ok, (f"MySQL/MariaDB XA: {why}" if ok else why)
