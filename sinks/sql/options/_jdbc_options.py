"""The options of every SQL format, ``twopc-jdbc`` (a drop-in for ``df.write.format("jdbc")``) and
``twopc-postgres``, read once by :meth:`JdbcOptions.parse`; no server is contacted. Spark's JDBC
writer options keep their names and meanings; :data:`SPARK_OPTIONS`, :data:`TWOPC_OPTIONS` and
:data:`REJECTED_OPTIONS` are listed, with their meanings, on the manual's Options page
(``docs/reference/options.md``). ``twopc-postgres`` refuses the options that need the staging
mode (:data:`STAGING_ONLY_OPTIONS`). Any other option is a driver parameter: translated, logged,
or refused (:mod:`twopc.sinks.sql.options._driver_params`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from sqlalchemy.engine import URL

from twopc import ConfigurationError

from ..._options import Duration, OptionReader
from ..._secrets import redacted_errors
from .._names import parse_twopc_schema
from .._registry import SqlDatabase, dialect_for
from . import (
    CONNECT_TIMEOUT,
    JDBC_FORMAT,
    LOCK_TIMEOUT,
    STAGING_RETENTION,
    Dialect,
    IsolationLevel,
    JdbcOptions,
    SaveMode,
)
from ._column_lists import parse_column_list, parse_column_types
from ._jdbc_url import translate_url
from ._timeout_rule import socket_and_lock_timeouts

__all__ = ["REJECTED_OPTIONS", "SPARK_OPTIONS", "STAGING_ONLY_OPTIONS", "TWOPC_OPTIONS", "JdbcOptions",
           "kwargs_options", "parse_options"]

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
    **{name.lower(): (name, _READ_ONLY) for name in (
        "prepareQuery", "partitionColumn", "lowerBound", "upperBound", "fetchsize", "customSchema", "pushDownPredicate",
        "pushDownAggregate", "pushDownLimit", "pushDownOffset", "pushDownTableSample", "pushDownJoin",
        "preferTimestampNTZ", "preferTimestampNanos", "hint")},
    "infertimestampntztype": ("inferTimestampNTZType",
                              _READ_ONLY + " (it is the pre-release name of preferTimestampNTZ)"),
    **{name.lower(): (name, _KERBEROS) for name in ("keytab", "principal", "refreshKrb5Config")},
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
_OPTION_NAMES = {n.lower(): n for n in (*SPARK_OPTIONS, *TWOPC_OPTIONS) if n not in ("url", "dbtable", "table")}
#: keyword arguments of the sinks' constructors -> option names: a keyword without ``_`` is an option (any case)
_KWARG_OPTIONS = {key: _OPTION_NAMES[key.replace("_", "")]
                  for key in ("user", "password", *(f.name for f in fields(JdbcOptions)))
                  if key.replace("_", "") in _OPTION_NAMES}


def parse_options(options: Mapping[str, str], format_name: str, dialect: Dialect | None) -> JdbcOptions:
    with redacted_errors(options):
        return _parse(OptionReader(options, format_name), dialect)


def kwargs_options(url: str | URL, table: str, kwargs: Mapping[str, Any]) -> dict[str, str]:
    """:meth:`JdbcOptions.from_kwargs`'s options."""
    options = {"url": url.render_as_string(hide_password=False) if isinstance(url, URL) else url, "dbtable": table}
    for key, value in kwargs.items():
        name = _KWARG_OPTIONS.get(key)
        if name is None:
            raise TypeError(f"unexpected keyword argument {key!r}")
        if value is not None:
            options[name] = _option_text(value)
    return options


def _parse(r: OptionReader, only: Dialect | None) -> JdbcOptions:
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
        "lock_timeout": r.duration("lockTimeout", LOCK_TIMEOUT),
        "copy_format": r.choice("copyFormat", ("auto", "binary", "csv"), "auto"),
        "commit_mode": r.choice("commitMode", ("auto", "prepared", "staging"), "auto"),
        "dead_letter_table": r.text("deadLetterTable"),  # stripped; blank is absent
    }
    staging, staging_given = _staging_options(r)
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
               else CONNECT_TIMEOUT)
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
    options = JdbcOptions(url=translated.url, dialect=dialect, table=table, connect_timeout=connect,
                          format_name=r.format_name, **values, **staging)
    _check_combinations(options, staging_given)
    return options


def _staging_options(r: OptionReader) -> tuple[dict[str, Any], list[str]]:
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


def _check_combinations(o: JdbcOptions, staging_given: list[str]) -> None:
    dialect = dialect_for(o.dialect)
    if o.commit_mode == "prepared" and not dialect.prepares:
        raise ConfigurationError(f"commitMode=prepared is not possible here: {dialect.no_prepare_reason}; use "
                                 f"commitMode=staging (or auto)")
    if o.copy_format != "auto" and not dialect.copy_formats:
        raise ConfigurationError(
            f"copyFormat={o.copy_format} applies only to PostgreSQL (COPY); this URL is {o.dialect}: "
            f"remove the option")
    if o.dead_letter_table is not None and (not dialect.dead_letters or o.commit_mode == "staging" or staging_given):
        raise ConfigurationError(
            "deadLetterTable is supported on PostgreSQL in the prepared commit mode only (twopc-postgres, or "
            "twopc-jdbc appending to a PostgreSQL table); this write is "
            + (f"to {o.dialect}" if not dialect.dead_letters else "in the staging mode")
            + ": remove the option")
    if o.format_name != JDBC_FORMAT:
        given = staging_given + (["commitMode=staging"] if o.commit_mode == "staging" else [])
        if given:
            raise ConfigurationError(
                f"{o.format_name} appends to an existing table through prepared transactions; "
                f"{', '.join(given)} need(s) the staging commit mode: use format {JDBC_FORMAT} "
                f"(same options) instead")


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return ", ".join(f"`{k.replace('`', '``')}` {v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(f"`{str(v).replace('`', '``')}`" for v in value)
    return str(value)


def _table_option(r: OptionReader) -> str:
    dbtable, table = r.get("dbtable"), r.get("table")
    if dbtable is not None and table is not None and dbtable.strip() != table.strip():
        raise ConfigurationError("options dbtable and table are both given, with different values: "
                                 "give only dbtable")
    text = (dbtable if dbtable is not None else table or "").strip()
    if not text:
        raise r.missing("dbtable", '.option("dbtable", "public.events")', aliases=("table",))
    if text.startswith("("):
        raise ConfigurationError(f"dbtable {text!r} is a subquery, which can only be read; a write needs a table name")
    return text


def _isolation(text: str | None) -> IsolationLevel:
    if text is None:
        return "READ_COMMITTED"
    t = "_".join(re.split(r"[\s_-]+", text.strip().upper()))
    if t == "NONE":
        raise ConfigurationError(
            "isolationLevel=NONE is not supported: twopc needs transactions to write exactly once; "
            "use READ_COMMITTED (the default) or a stricter level")
    if t in _ISOLATION_LEVELS:
        return t
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
