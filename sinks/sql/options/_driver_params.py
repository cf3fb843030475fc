"""JDBC driver parameters, translated to the Python drivers' own. A parameter in a JDBC URL's query string, or a
writer option the format does not know (Spark hands those to the JDBC driver), is translated to the Python driver's
equivalent (:data:`PG_PARAMETERS`, :data:`MYSQL_PARAMETERS`, :data:`SQLITE_PARAMETERS`), logged at INFO when it only
tunes the Java driver (``*_JAVA_ONLY``), and refused otherwise: never dropped silently. Differences from the Java
drivers, on purpose: PostgreSQL ``ssl=true`` without ``sslmode`` means ``sslmode=verify-full`` (pgjdbc's meaning);
PyMySQL has no opportunistic TLS, so ``useSSL=true`` or ``sslMode=PREFERRED`` *requires* TLS (without certificate
check), and ``VERIFY_CA`` / ``VERIFY_IDENTITY`` need the CA as a PEM file (``serverSslCert``); a connect or socket
timeout of 0 ("wait forever") is not supported: twopc's options (``connectTimeout``, ``socketTimeout``,
``tcpKeepAlive``) take over."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from twopc import ConfigurationError

from ..._options import MISSPELLED, closest_option, unknown_option_hint
from ..._secrets import SECRET_KEYS, after_password

__all__ = ["MYSQL_JAVA_ONLY", "MYSQL_PARAMETERS", "PG_JAVA_ONLY", "PG_PARAMETERS", "SQLITE_PARAMETERS", "DriverParam",
           "Translated", "translate_mysql", "translate_pg", "translate_sqlite"]

log = logging.getLogger("twopc.sinks.sql")


class DriverParam(NamedTuple):
    """One driver parameter: from the JDBC URL's query string or an extra option."""

    key: str  # lower case
    name: str  # as written
    value: str
    source: str  # "the JDBC URL" or "option"
    hidden: bool = False  # after password= in the URL: maybe part of a password, never shown


class Translated(NamedTuple):
    """The Python driver's URL query parameters, and the waits among the JDBC parameters (``None``: not given)."""

    query: dict[str, str | tuple[str, ...]]
    connect_timeout: int | None
    socket_timeout_ms: int | None = None
    tcp_keepalive: bool | None = None


#: PostgreSQL JDBC parameters translated to libpq (psycopg) equivalents.
PG_PARAMETERS: tuple[str, ...] = (
    "user", "password", "ssl", "sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword",
    "applicationName", "connectTimeout", "loginTimeout", "currentSchema", "options",
    "targetServerType", "gssEncMode", "channelBinding", "loadBalanceHosts", "socketTimeout",
    "tcpKeepAlive",
)
#: PostgreSQL JDBC parameters that only tune the Java driver: accepted, logged at INFO.
PG_JAVA_ONLY: tuple[str, ...] = (
    "reWriteBatchedInserts", "stringtype", "prepareThreshold", "tcpNoDelay",
    "defaultRowFetchSize", "binaryTransfer", "binaryTransferEnable", "binaryTransferDisable",
    "preparedStatementCacheQueries", "preparedStatementCacheSizeMiB", "preferQueryMode",
    "loggerLevel", "loggerFile", "logUnclosedConnections", "assumeMinServerVersion",
    "receiveBufferSize", "sendBufferSize", "disableColumnSanitiser",
    "cancelSignalTimeout", "escapeSyntaxCallMode", "maxResultBuffer", "adaptiveFetch",
    "adaptiveFetchMinimum", "adaptiveFetchMaximum", "logServerErrorDetail",
    "quoteReturningIdentifiers", "hideUnprivilegedObjects", "hostRecheckSeconds",
    "cleanupSavepoints",
)
#: MySQL / MariaDB JDBC parameters translated to PyMySQL equivalents.
MYSQL_PARAMETERS: tuple[str, ...] = (
    "user", "password", "sslMode", "useSSL", "requireSSL", "verifyServerCertificate",
    "trustServerCertificate", "disableSslHostnameVerification", "serverSslCert",
    "connectTimeout", "socketTimeout", "tcpKeepAlive", "characterEncoding", "serverTimezone",
    "connectionTimeZone",
)
#: MySQL / MariaDB JDBC parameters that only tune the Java driver: accepted, logged at INFO.
MYSQL_JAVA_ONLY: tuple[str, ...] = (
    "rewriteBatchedStatements", "useServerPrepStmts", "cachePrepStmts", "prepStmtCacheSize",
    "prepStmtCacheSqlLimit", "useUnicode", "useLegacyDatetimeCode",
    "useJDBCCompliantTimezoneShift", "allowPublicKeyRetrieval", "zeroDateTimeBehavior",
    "tcpNoDelay", "useCompression", "useLocalSessionState",
    "elideSetAutoCommits", "maintainTimeStats", "cacheResultSetMetadata",
    "cacheServerConfiguration", "useCursorFetch", "defaultFetchSize", "tinyInt1isBit",
    "transformedBitIsBoolean", "yearIsDateType", "autoReconnect", "useBulkStmts",
    "useBatchMultiSend", "useReadAheadInput", "dumpQueriesOnException", "profileSQL", "logger",
)
#: SQLite JDBC (xerial) parameters translated to sqlite3 equivalents.
SQLITE_PARAMETERS: tuple[str, ...] = ("busy_timeout",)


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
    **dict.fromkeys(("clientcertificatekeystoreurl", "keystore"), "is a Java key store, which PyMySQL cannot read: "
                    "use a SQLAlchemy URL mysql+pymysql://...?ssl_cert=/path/cert.pem&ssl_key=/path/key.pem"),
    "sessionvariables": "runs arbitrary SET statements on connect; use sessionInitStatement",
    "readonly": "would make every write fail",
}

_MYSQL_TLS_KEYS = frozenset({"sslmode", "usessl", "requiressl", "verifyservercertificate",
                             "trustservercertificate", "disablesslhostnameverification", "serversslcert"})
_PG_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
#: pgjdbc parameters libpq takes as they are: key -> (libpq's name, name in messages, the words)
_PG_WORDS = {"sslmode": ("sslmode", "sslmode", _PG_SSLMODES),
             "gssencmode": ("gssencmode", "gssEncMode", ("disable", "allow", "prefer", "require")),
             "channelbinding": ("channel_binding", "channelBinding", ("disable", "prefer", "require"))}
#: pgjdbc's targetServerType -> libpq's target_session_attrs (a standby is refused: it cannot be written)
_PG_TARGETS = {"any": "any", **dict.fromkeys(("primary", "master", "preferprimary"), "read-write")}
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


def _unknown(prop: DriverParam, dialect_label: str, mapped: tuple[str, ...],
             java_only: tuple[str, ...], supported: Sequence[str]) -> ConfigurationError:
    if prop.hidden:
        return ConfigurationError(after_password("JDBC"))
    accepted = f"; accepted without effect (Java driver tuning): {', '.join(java_only)}" if java_only else ""
    if prop.source == "the JDBC URL":
        head = (f"parameter {prop.name} in the JDBC URL is not supported for {dialect_label} "
                f"({unknown_option_hint(prop.name, mapped + java_only)})")
        tail = ""
    else:
        near = closest_option(prop.name, (*supported, *mapped, *java_only), cutoff=MISSPELLED)
        if near is not None:
            return ConfigurationError(
                f"unknown option {prop.name!r}: did you mean {near!r}? It is neither a Spark JDBC nor a twopc "
                f"option, nor a {dialect_label} driver parameter twopc knows (Spark hands unknown options to the "
                f"JDBC driver; twopc refuses those its Python driver cannot take)")
        head = (f"option {prop.name} is neither a Spark JDBC nor a twopc option, nor a {dialect_label} "
                f"driver parameter twopc knows ({unknown_option_hint(prop.name, (*supported, *mapped, *java_only))}; "
                f"Spark passes unknown options to the JDBC driver)")
        tail = f" Supported options: {', '.join(supported)}." if supported else ""
    return ConfigurationError(
        f"{head}. Driver parameters translated for {dialect_label}: {', '.join(mapped)}{accepted}.{tail} "
        f"Remove it, or give a SQLAlchemy URL with the Python driver's own parameters")


def _untranslated(prop: DriverParam, dialect_label: str, mapped: tuple[str, ...], java_only: tuple[str, ...],
                  refused: dict[str, str], supported: Sequence[str]) -> None:
    """A parameter with no Python equivalent: logged when it only tunes the Java driver, else refused."""
    in_url = prop.source == "the JDBC URL"
    if prop.key in {k.lower() for k in java_only}:
        log.info("twopc: %s %s=%s only tunes the Java %s JDBC driver; it has no effect here",
                 "URL parameter" if in_url else "option", "***" if prop.hidden else prop.name,
                 prop.value if prop.key not in SECRET_KEYS and not prop.hidden else "***", dialect_label)
    elif prop.key in refused and not prop.hidden:
        label = f"parameter {prop.name} in the JDBC URL" if in_url else f"option {prop.name}"
        raise ConfigurationError(f"{label} is not supported: it {refused[prop.key]}")
    else:
        raise _unknown(prop, dialect_label, mapped, java_only, supported)


def _whole(prop: DriverParam, unit_ms: bool) -> int:
    t = prop.value.strip()
    if not t.isdigit():
        unit = "milliseconds" if unit_ms else "seconds"
        raise ConfigurationError(f"{prop.name} must be a whole number of {unit}, got {prop.value!r}")
    return int(t)


def _seconds(prop: DriverParam, unit_ms: bool) -> int | None:
    """A JDBC timeout in seconds (rounded up); None for 0 (= no limit in JDBC)."""
    n = _whole(prop, unit_ms)
    if n == 0:
        return None
    return max(1, math.ceil(n / 1000)) if unit_ms else n


class _Waits:
    """``socketTimeout`` and ``tcpKeepAlive`` among the JDBC parameters (both drivers)."""

    def __init__(self) -> None:
        self.socket_ms: int | None = None
        self.keepalive: bool | None = None

    def take(self, prop: DriverParam, *, unit_ms: bool) -> bool:
        """Read *prop* if it is one of them (*unit_ms*: Connector/J's milliseconds, not pgjdbc's seconds)."""
        if prop.key == "sockettimeout":
            n = _whole(prop, unit_ms) * (1 if unit_ms else 1000)
            if n == 0:
                log.info("twopc: socketTimeout=0 (no limit) is not supported; using the socketTimeout "
                         "option (default 60 s)")
            self.socket_ms = n or None
            return True
        if prop.key == "tcpkeepalive":
            self.keepalive = _jdbc_bool(prop)
            return True
        return False


def _jdbc_bool(prop: DriverParam) -> bool:
    t = prop.value.strip().lower()
    if t in ("true", "", "1", "yes"):
        return True
    if t in ("false", "0", "no"):
        return False
    raise ConfigurationError(f"{prop.name} must be true or false, got {prop.value!r}")


def translate_pg(props: list[DriverParam], base_query: Mapping[str, str | tuple[str, ...]],
                 supported: Sequence[str] = ()) -> Translated:
    """libpq (psycopg) parameters for pgjdbc parameters (see :data:`PG_PARAMETERS`)."""
    q: dict[str, str | tuple[str, ...]] = {}
    timeouts: dict[str, int | None] = {}  # connecttimeout, logintimeout: None is 0 (no limit)
    ssl_flag = False
    schema: str | None = None
    waits = _Waits()
    for p in props:
        k, v = p.key, p.value
        if waits.take(p, unit_ms=False):
            continue
        if k == "ssl":
            t = v.strip().lower()
            if t not in ("", "true", "false"):
                raise ConfigurationError(f"ssl must be true or false, got {v!r}")
            ssl_flag = t != "false"
        elif k in _PG_WORDS:
            libpq_name, shown, words = _PG_WORDS[k]
            t = v.strip().lower()
            if t not in words:
                raise ConfigurationError(f"{shown} must be one of {', '.join(words)}, got {v!r}")
            q[libpq_name] = t
        elif k in ("sslrootcert", "sslcert", "sslkey", "sslpassword"):
            if k == "sslkey" and v.lower().endswith((".pk8", ".der")):
                log.info("twopc: sslkey %s looks like a PKCS-8 DER key (pgjdbc's format); libpq "
                         "needs the key as PEM", v)
            q[k] = v
        elif k == "applicationname":
            q["application_name"] = v
        elif k in ("connecttimeout", "logintimeout"):
            timeouts[k] = _seconds(p, unit_ms=False)
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
            if t in ("secondary", "slave", "prefersecondary", "preferslave", "standby", "preferstandby"):
                raise ConfigurationError(
                    f"targetServerType={v} would connect to a standby, which cannot be written; use "
                    f"targetServerType=primary")
            if t not in _PG_TARGETS:
                raise ConfigurationError(f"targetServerType must be any or primary, got {v!r}")
            q["target_session_attrs"] = _PG_TARGETS[t]
        elif k == "loadbalancehosts":
            q["load_balance_hosts"] = "random" if _jdbc_bool(p) else "disable"
        else:
            _untranslated(p, "PostgreSQL", PG_PARAMETERS, PG_JAVA_ONLY, _PG_REFUSED, supported)
    if ssl_flag and "sslmode" not in q and "sslmode" not in base_query:
        # pgjdbc: ssl=true without sslmode verifies the certificate and the host name
        q["sslmode"] = "verify-full"
        log.info("twopc: ssl=true means sslmode=verify-full (as in pgjdbc)")
    if schema is not None:
        existing = q.get("options", base_query.get("options", ""))
        existing_text = existing[-1] if isinstance(existing, tuple) else existing
        search = schema.replace("\\", "\\\\").replace(" ", "\\ ")  # libpq's escapes
        q["options"] = f"{existing_text} -csearch_path={search}".strip()
    timeout = timeouts.get("connecttimeout") or timeouts.get("logintimeout")
    if None in timeouts.values() and timeout is None:
        log.info("twopc: a connect timeout of 0 (no limit) is not supported; using the "
                 "connectTimeout option (default 10 s)")
    return Translated(q, timeout, waits.socket_ms, waits.keepalive)


def translate_mysql(props: list[DriverParam], mariadb: bool, supported: Sequence[str] = ()) -> Translated:
    """PyMySQL parameters for MySQL/MariaDB Connector/J parameters (their TLS parameters differ)."""
    q: dict[str, str | tuple[str, ...]] = {}
    timeout: int | None = None
    by_key = {p.key: p for p in props}
    waits = _Waits()
    for p in props:
        k, v = p.key, p.value
        if k in _MYSQL_TLS_KEYS or waits.take(p, unit_ms=True):
            continue
        if k == "connecttimeout":
            sec = _seconds(p, unit_ms=True)
            if sec is None:
                log.info("twopc: connectTimeout=0 (no limit) is not supported; using the "
                         "connectTimeout option (default 10 s)")
            timeout = sec
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
            log.info("twopc: %s=%s: timestamps are written in UTC", p.name, v)
        else:
            _untranslated(p, "MySQL/MariaDB", MYSQL_PARAMETERS, MYSQL_JAVA_ONLY, _MYSQL_REFUSED, supported)
    q.update(_mysql_tls(by_key, mariadb))
    return Translated(q, timeout, waits.socket_ms, waits.keepalive)


def _mysql_tls(by_key: Mapping[str, DriverParam], mariadb: bool) -> dict[str, str | tuple[str, ...]]:
    """Connector/J TLS parameters as PyMySQL's ``ssl_*`` URL parameters; never weaker than asked,
    and each TLS parameter without effect is logged at INFO."""
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
    elif mariadb:  # MariaDB Connector/J 2.x: useSsl verifies unless told not to (flags read lazily: unread = unused)
        use = flag("usessl")
        mode = (("required" if flag("trustservercertificate") else
                 "verify_ca" if flag("disablesslhostnameverification") else "verify_identity") if use else
                "disabled" if use is False else None)
    else:  # MySQL Connector/J: useSSL=true alone is PREFERRED
        use, require, verify = flag("usessl"), flag("requiressl"), flag("verifyservercertificate")
        mode = ("disabled" if use is False else "verify_ca" if verify else "required" if require else
                "preferred" if use else None)
    if mode in ("preferred", "required") and flag("verifyservercertificate"):
        mode = "verify_ca"  # stricter of the two
    if mode == "preferred":
        log.info("twopc: PyMySQL has no opportunistic TLS: TLS is required (without "
                 "certificate verification), as with sslMode=REQUIRED")
    if mode in ("verify_ca", "verify_identity") and ca is None:
        raise ConfigurationError(
            f"TLS with certificate verification "
            f"({'VERIFY_CA' if mode == 'verify_ca' else 'VERIFY_IDENTITY'}) needs the CA certificate "
            f"as a PEM file, because PyMySQL cannot read Java trust stores: add "
            f"serverSslCert=/path/ca.pem to the URL, or give a SQLAlchemy URL "
            f"mysql+pymysql://...?ssl_ca=/path/ca.pem")
    # the certificate's host name is checked under VERIFY_IDENTITY only; the CA wherever TLS is on and one is given
    q: dict[str, str | tuple[str, ...]] = ({"ssl_check_hostname": "false"}
                                           if mode in ("preferred", "required", "verify_ca") else {})
    if ca is not None and mode not in (None, "disabled"):
        used.add("serversslcert")
        q["ssl_ca"] = ca
        if mode in ("preferred", "required"):
            log.info("twopc: serverSslCert given: the server certificate is verified")
    for key, p in by_key.items():
        if key in _MYSQL_TLS_KEYS and key not in used:
            log.info("twopc: %s=%s has no effect with the other TLS parameters given (TLS: %s)",
                     p.name, p.value, (mode or "not requested").replace("_", " "))
    return q


def translate_sqlite(props: list[DriverParam], supported: Sequence[str] = ()) -> Translated:
    """sqlite3 parameters for xerial's (see :data:`SQLITE_PARAMETERS`)."""
    q: dict[str, str | tuple[str, ...]] = {}
    for p in props:
        if p.key == "busy_timeout":
            q["timeout"] = f"{_whole(p, unit_ms=True) / 1000:g}"
        else:
            raise _unknown(p, "SQLite", SQLITE_PARAMETERS, (), supported)
    return Translated(q, None)


