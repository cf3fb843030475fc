"""PostgreSQL as the shared SQL layer sees it (:class:`PostgresDialect`, found through the
``twopc.sql_dialects`` entry points), importable without psycopg; its prepared-transaction SQL is
:class:`twopc.sinks.postgres._prepared.PostgresPrepared`."""

from __future__ import annotations

import hashlib
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL

from twopc import ConfigurationError
from twopc.spi import TargetConfigurationError

from .._net import KEEPALIVE_COUNT, KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S
from ..sql._engines import APPLICATION_NAME
from ..sql._names import sql_literal
from ..sql._registry import DriverBound, SqlDatabase

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.types import TypeEngine

    from ..sql._privileges import Run
    from ..sql.options import NetTimeouts
    from ..sql.options._driver_params import DriverParam, Translated
    from ..sql.options._jdbc_url import JdbcParts

__all__ = ["PostgresDialect", "lease_key"]

def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _hosts(hosts: list[str]) -> tuple[str | None, int | None, list[str]]:
    """(host, port, []) of one host; (None, None, ["h:p", ...]) of several; localhost of none."""
    from ..sql.options._jdbc_url import host_port  # reading a URL: the driver's, at planning
    if not hosts:
        return "localhost", None, []
    parsed = [host_port(h) for h in hosts]
    if len(parsed) == 1:
        return parsed[0][0], parsed[0][1], []
    return None, None, [(f"[{h}]" if ":" in h else h) + (f":{p}" if p else "") for h, p in parsed]


def lease_key(sink_id: str) -> int:
    """The advisory-lock key of *sink_id*'s lease (63 bits, never negative)."""
    return int.from_bytes(hashlib.sha256(f"twopc-lease:{sink_id}".encode()).digest()[:8], "big") & (2**63 - 1)


#: PostgreSQL's longest identifier, in bytes (NAMEDATALEN - 1 of a stock build)
_NAME_BYTES = 63


class PostgresDialect(SqlDatabase):
    """PostgreSQL: its facts and driver rules."""

    name = "postgresql"
    format_name = "twopc-postgres"
    product = "PostgreSQL"
    id_name = "GID"
    max_id_bytes = 199  # GID of PREPARE TRANSACTION
    unique_violations = frozenset({"23505"})  # unique_violation
    driver_error = DriverBound[type[Exception]]("psycopg:Error")
    dbapi = "psycopg"
    extra = "postgres"
    prepares = True
    shown_plain = re.compile(r"^[a-z_][a-z0-9_]*$")
    name_quotes = '"'
    folds_lower = True
    twopc_schemas = True
    checks_privileges = True
    label = "PostgreSQL"
    default_port = 5432
    copy_formats = True
    dead_letters = True
    errors_module = "twopc.sinks.postgres._errors"
    #: needs pyarrow, which a worker that only commits never loads
    compatible = DriverBound[Any]("twopc.sinks.postgres._columns:compatible")

    @staticmethod
    def connect_args(url: URL, timeouts: NetTimeouts) -> dict[str, Any]:
        """psycopg's connect arguments: timeouts, TCP keepalive, cursors bounded by ``socketTimeout``,
        and twopc's ``application_name`` unless the URL sets one."""
        from ._deadline import deadline_cursor
        args: dict[str, Any] = {"connect_timeout": timeouts.connect, "keepalives": int(timeouts.keepalive),
                                "cursor_factory": deadline_cursor(timeouts.reply)}
        if "application_name" not in url.query:
            args["application_name"] = APPLICATION_NAME
        if timeouts.keepalive:
            args.update(keepalives_idle=KEEPALIVE_IDLE_S, keepalives_interval=KEEPALIVE_INTERVAL_S,
                        keepalives_count=KEEPALIVE_COUNT)
        if hasattr(socket, "TCP_USER_TIMEOUT"):
            args["tcp_user_timeout"] = int(timeouts.reply * 1000)
        return args

    session_statements = DriverBound[Any]("twopc.sinks.postgres._server:session_settings")
    catalog_columns = DriverBound[Any]("twopc.sinks.postgres._server:catalog_columns")
    rollback_problem = DriverBound[Any]("twopc.sinks.postgres._server:table_rollback_problem")
    staging_copy = DriverBound[Any]("twopc.sinks.postgres._copy:staging_copy")
    sink_class = DriverBound[Any]("twopc.sinks.postgres:PostgresSink")

    @classmethod
    def prepare_capacity(cls, conn: Connection, sink: Any) -> tuple[bool, str]:
        n, used = conn.exec_driver_sql("SELECT current_setting('max_prepared_transactions')::int, "
                                       "(SELECT count(*) FROM pg_prepared_xacts)").one()
        if n <= 0:
            return False, ("the server has max_prepared_transactions = 0, so it cannot prepare transactions: set it "
                           "in postgresql.conf to at least the partitions a batch writes plus retried attempts (e.g. "
                           "64) and restart PostgreSQL, for the faster prepared mode")
        return True, f"PostgreSQL PREPARE TRANSACTION, max_prepared_transactions = {n}, {n - used} free now"

    @staticmethod
    def name_too_long(part: str) -> str | None:
        """Longer than NAMEDATALEN - 1 bytes (a stock build's): PostgreSQL would cut it short."""
        size = len(part.encode("utf-8"))
        return None if size <= _NAME_BYTES else (
            f"{size} bytes; PostgreSQL identifiers are at most {_NAME_BYTES} bytes (longer ones are cut short, so "
            f"the table written would not be the one named)")

    @classmethod
    def ensure_schema(cls, run: Run, schema: str, database: str) -> None:
        from ..sql._privileges import denied  # the plan's: workers create no schema
        q = _quoted(schema)
        found = run(f"SELECT has_schema_privilege(oid, 'USAGE') FROM pg_namespace "
                    f"WHERE nspname = {sql_literal(schema)}")
        if not found:
            try:
                run(f"CREATE SCHEMA IF NOT EXISTS {q}")
            except Exception as exc:
                if not denied(exc):
                    if "23505" in str(getattr(getattr(exc, "orig", exc), "sqlstate", "")):
                        return  # created concurrently
                    raise
                user = cls.current_user(run)
                raise TargetConfigurationError(
                    f"twopcSchema {schema} does not exist and the user {user} may not create it (it has no CREATE "
                    f"privilege on database {database}): run as an owner: CREATE SCHEMA {q} AUTHORIZATION {user}; (or "
                    f"GRANT CREATE ON DATABASE {_quoted(database)} TO {user};) then write again. Validation stopped "
                    f"before any task: nothing was written") from None
            return
        if not found[0][0]:
            user = cls.current_user(run)
            raise TargetConfigurationError(
                f"the user {user} has no USAGE privilege on twopcSchema {schema}, where twopc keeps its tables: run as "
                f"the schema's owner: GRANT USAGE, CREATE ON SCHEMA {q} TO {user}; then write again. Validation "
                f"stopped before any task: nothing was written")

    truncates_in_transaction = True
    stages_without_slot = True
    table_comments = "comment on"
    stages_in_table_types = True
    stage_txn_default = "current_setting('twopc.txn_id')"
    arrow_types: ClassVar[Mapping[str, TypeEngine[Any]]] = {
        "float64": postgresql.DOUBLE_PRECISION(), "binary": postgresql.BYTEA(), "nested": postgresql.JSONB()}
    jdbc_subprotocols = frozenset({"postgresql"})
    jdbc_bare_database = True

    @staticmethod
    def jdbc_url(parts: JdbcParts) -> tuple[URL, dict[str, str | tuple[str, ...]]]:
        """psycopg's URL; several hosts go to SQLAlchemy's multi-host ``?host=`` syntax."""
        host, port, multi = _hosts(parts.hosts)
        return (URL.create("postgresql+psycopg", host=host, port=port, database=parts.database),
                {"host": tuple(multi)} if multi else {})

    @staticmethod
    def sqlalchemy_url(url: URL, driver: str) -> URL:
        if driver not in ("", "psycopg", "psycopg2", "psycopg2cffi"):
            raise ConfigurationError(
                f"twopc connects to PostgreSQL with psycopg 3, not {driver}: use a "
                f"postgresql:// or postgresql+psycopg:// URL")
        return url.set(drivername="postgresql+psycopg")

    @staticmethod
    def translate_params(props: Sequence[DriverParam], base_query: Mapping[str, str | tuple[str, ...]], flavor: str,
                         supported: Sequence[str]) -> Translated:
        from ..sql.options._driver_params import translate_pg  # as in _hosts
        return translate_pg(list(props), base_query, supported)

    @staticmethod
    def upsert_sql(into: str, select: str, source: str, q: Callable[[str], str], keys: Sequence[str],
                   others: Sequence[str], stage_keys: Sequence[str]) -> str | None:
        """``ON CONFLICT ... DO UPDATE`` from the latest staged row of each key."""
        skeys = ", ".join(q(k) for k in stage_keys)
        sets = ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in others)
        action = f"DO UPDATE SET {sets}" if others else "DO NOTHING"
        return (f"{into} SELECT DISTINCT ON ({skeys}) {select} {source} ORDER BY {skeys}, ctid DESC "
                f"ON CONFLICT ({', '.join(q(k) for k in keys)}) {action}")

    @staticmethod
    def recreate_losses(conn: Connection, quoted: str) -> list[str]:
        """Grants to other roles, triggers and row security policies."""
        queries = (
            ("grants to", ("SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) "
                           "END FROM pg_class c, aclexplode(c.relacl) a WHERE c.oid = to_regclass(%s) "
                           "AND a.grantee <> c.relowner ORDER BY 1")),
            ("trigger",
             "SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass(%s) AND NOT tgisinternal ORDER BY 1"),
            ("row security policy", "SELECT polname FROM pg_policy WHERE polrelid = to_regclass(%s) ORDER BY 1"),
        )
        found = ((what, [str(r[0]) for r in conn.exec_driver_sql(query, (quoted,)).all()]) for what, query in queries)
        return [f"{what} {', '.join(names)}" for what, names in found if names]

    ledger_ddl = ("CREATE TABLE IF NOT EXISTS {table} (sink_id text NOT NULL, name text NOT NULL, body text NOT NULL, "
                  "written_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (sink_id, name))")
    ledger_upsert = ("INSERT INTO {table} (sink_id, name, body) VALUES (%s, %s, %s) "
                     "ON CONFLICT (sink_id, name) DO UPDATE SET body = EXCLUDED.body")
    session_id_sql = "SELECT pg_backend_pid()"
    server_identity_sql = ("SELECT (SELECT system_identifier FROM pg_control_system())::text, oid::text "
                           "FROM pg_database WHERE datname = current_database()")

    @staticmethod
    def lease_sql(sink_id: str, database: str) -> tuple[str, str, Any]:
        return "SELECT pg_try_advisory_lock(%s)", "SELECT pg_advisory_unlock(%s)", lease_key(sink_id)

    @staticmethod
    def lease_holder_sql(key: Any, session: int) -> tuple[str, tuple[Any, ...]]:
        query = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = %s "
                 "AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1 AND database = "
                 "(SELECT oid FROM pg_database WHERE datname = current_database())")
        return query, (session, key >> 32, key & 0xFFFFFFFF)

    @staticmethod
    def server_identity(row: Sequence[Any], table: str) -> str:
        return f"postgresql system {row[0]} database oid {row[1]} table {table}"
