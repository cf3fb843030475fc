"""One URL translator for every SQL format: :func:`translate_url` reads a JDBC URL or a SQLAlchemy URL (any backend) and
gives the SQLAlchemy URL of the Python driver twopc connects with, credentials set and driver parameters translated
(:mod:`twopc.sinks.sql.options._driver_params`). Credentials in a URL's query string move into its user info, so that
:func:`~twopc.sinks.sql.options.safe_url` hides them."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from sqlalchemy.engine import URL, make_url

from twopc import ConfigurationError

from ..._options import unknown_option_hint
from ..._secrets import SECRET_KEYS, after_password
from .._registry import dialect_for
from . import Dialect, safe_url
from ._driver_params import DriverParam, Translated

__all__ = ["JdbcParts", "SqlUrl", "host_port", "query_params", "translate_url"]


@dataclass(frozen=True, repr=False)
class SqlUrl:
    """A translated URL: the SQLAlchemy *url* *with* credentials (never print it; its query holds no connect
    timeout), the *dialect* (``postgresql``, ``mysql`` for MySQL and MariaDB, ``sqlite`` or ``other``), and the waits
    found among the JDBC parameters (``None``: not given)."""

    url: URL
    dialect: Dialect
    connect_timeout: int | None = None
    socket_timeout_ms: int | None = None
    tcp_keepalive: bool | None = None

    def __repr__(self) -> str:
        return f"SqlUrl({safe_url(self.url)!r}, {self.dialect!r})"


class JdbcParts(NamedTuple):
    """A JDBC URL taken apart (the subprotocol lower-case), for its dialect to build from."""

    subprotocol: str
    user: str | None
    password: str | None
    hosts: list[str]
    database: str | None
    params: list[tuple[str, str]]


def translate_url(raw: str, *, user: str | None = None, password: str | None = None,
                  properties: Sequence[tuple[str, str]] = (), supported: Sequence[str] = ()) -> SqlUrl:
    """Translate a JDBC or SQLAlchemy URL (and driver parameters given as options, *properties*) into a SQLAlchemy URL
    for the Python driver, *user* and *password* overriding the URL's; *supported* (the format's options) feeds the
    message about an unknown one. No server is contacted. Raises ``ConfigurationError``: the URL is malformed or
    unsupported, or a parameter is unknown, refused, or given twice differently (never with the password)."""
    props: dict[str, DriverParam] = {}
    base_query: dict[str, str | tuple[str, ...]] = {}

    def add(key: str, value: str, source: str, hidden: bool = False) -> None:
        lk = key.lower()
        old = props.get(lk)
        # (a user= after password= may be a piece of the password: never let it replace the user)
        if (old is not None and old.value != value) or (hidden and lk == "user"):
            if hidden or old is None or old.hidden:
                raise ConfigurationError(after_password("JDBC"))
            where = "twice in the JDBC URL" if old.source == source else f"in {old.source} and as {source}"
            raise ConfigurationError(f"parameter {key} is given {where}, with different values: give it once")
        props[lk] = DriverParam(lk, key, value, source, hidden)

    if raw.lower().startswith("jdbc:"):
        parts = _split_jdbc(raw)
        after_secret = False
        for k, v in parts.params:
            add(k, v, "the JDBC URL", after_secret and k.lower() not in SECRET_KEYS)
            after_secret = after_secret or k.lower() in SECRET_KEYS
        url_user, url_password = parts.user, parts.password
        database = dialect_for(parts.subprotocol)
        url, base_query = database.jdbc_url(parts)
        flavor = parts.subprotocol
    else:
        try:
            url = make_url(raw)
        except Exception:  # noqa: BLE001 - ArgumentError, ValueError (bad port)...: the text may hold the password
            raise ConfigurationError(
                "url is neither a JDBC URL (jdbc:postgresql://host:port/db, jdbc:mysql://..., "
                "jdbc:mariadb://..., jdbc:sqlite:/path/file.db) nor a valid SQLAlchemy URL "
                "(postgresql://user@host:port/db, mysql://..., sqlite:////abs/path.db)") from None
        backend, _, driver = url.drivername.partition("+")
        database = dialect_for(backend)
        url = database.sqlalchemy_url(url, driver.lower())
        url_user, url_password = url.username, url.password
        flavor = database.name
        base_query = dict(url.query)
        for key in [k for k in base_query if k.lower() in ("user", "password")]:  # they would show in describe()
            value = base_query.pop(key)
            text = value[-1] if isinstance(value, tuple) else value
            url_user, url_password = (text, url_password) if key.lower() == "user" else (url_user, text)
        url = url.set(query={})
    for k, v in properties:
        add(k, v, "option")
    if (prop := props.pop("user", None)) is not None:
        url_user = prop.value
    if (prop := props.pop("password", None)) is not None:
        url_password = prop.value
    translated = (database.translate_params(list(props.values()), base_query, flavor, supported)
                  or _untranslated(list(props.values()), supported))
    query = dict(base_query)
    for k, value in translated.query.items():
        if k in query and query[k] != value and k != "options":  # options: merged by the translation
            raise ConfigurationError(
                f"driver parameter {k} is set in the url and, differently, by a JDBC "
                f"parameter or option: give it once")
        query[k] = value
    url = database.login(url.set(query=query), url_user if user is None else user,
                         url_password if password is None else password)
    return SqlUrl(url, database.name, *translated[1:])  # the waits


def _untranslated(props: Sequence[DriverParam], supported: Sequence[str]) -> Translated:
    """No driver parameters translated (a database twopc has no rules for): given ones are refused."""
    if props:
        names = ", ".join(f"{p.name} ({unknown_option_hint(p.name, supported)})" for p in props)
        raise ConfigurationError(
            f"option(s) {names} are not twopc or Spark JDBC options, and driver "
            f"parameters are only translated for PostgreSQL, MySQL/MariaDB and SQLite: put "
            f"them in the SQLAlchemy URL's query string in your driver's own spelling. "
            f"Supported options: {', '.join(supported)}")
    return Translated({}, None)


def _split_jdbc(raw: str) -> JdbcParts:
    body = raw[len("jdbc:"):]
    sub, sep, rest = body.partition(":")
    sub = sub.lower()
    dialect = dialect_for(sub) if sep else None
    if dialect is None or sub not in dialect.jdbc_subprotocols:
        shown = sub if re.fullmatch(r"[a-z0-9+._-]{1,30}", sub) else "?"
        raise ConfigurationError(
            f"JDBC subprotocol {shown!r} is not supported: twopc translates jdbc:postgresql:, "
            f"jdbc:mysql:, jdbc:mariadb: and jdbc:sqlite: URLs. For another database give a "
            f"SQLAlchemy URL instead (e.g. mssql+pyodbc://..., oracle+oracledb://...); "
            f"commitMode=staging may work there")
    if (own := dialect.split_jdbc(rest)) is not None:
        return own
    path, _, query_text = rest.partition("?")
    if not path.startswith("//") and not dialect.jdbc_bare_database:
        raise ConfigurationError(
            f"this jdbc:{sub}: URL form is not supported: twopc translates "
            f"jdbc:{sub}://host[:port]/database (no load-balancing, replication or failover "
            f"variants); give a SQLAlchemy URL mysql+pymysql://host:port/db instead")
    if path.startswith("//"):
        netloc, _, dbpath = path[2:].partition("/")
    else:  # jdbc:postgresql:database  or  jdbc:postgresql:/
        netloc, dbpath = "", path.lstrip("/")
    if "@" not in netloc and re.match(r"//[^=@]*:[^=]*@", rest):
        # user:password@ cut short by a raw '/' or '?' in the password
        raise ConfigurationError(
            "the JDBC URL's user info (user:password@host) holds a raw '/' or '?': URL-encode the "
            "password (/ as %2F, ? as %3F, # as %23, @ as %40, % as %25) or give it as the password option")
    user = password = None
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        u, colon, p = userinfo.partition(":")
        user = urllib.parse.unquote(u) or None
        password = urllib.parse.unquote(p) if colon else None
    hosts = [h.strip() for h in netloc.split(",") if h.strip()]
    if not dialect.jdbc_bare_database and any("(" in h or "=" in h for h in hosts):
        raise ConfigurationError(
            "the JDBC URL uses the address=(host=...)(port=...) host syntax, which twopc does not "
            "translate: write host[:port]")
    return JdbcParts(sub, user, password, hosts, urllib.parse.unquote(dbpath) or None, query_params(query_text))


def query_params(query_text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for piece in query_text.split("&"):
        if not piece:
            continue
        k, _, v = piece.partition("=")
        key = urllib.parse.unquote_plus(k).strip()
        if not key:
            raise ConfigurationError(after_password("JDBC") if any(name.lower() in SECRET_KEYS for name, _ in out)
                                     else "the JDBC URL has a parameter without a name")
        out.append((key, urllib.parse.unquote_plus(v)))
    return out


def host_port(h: str) -> tuple[str, int | None]:
    if h.startswith("["):  # [ipv6]:port
        host, _, port_text = h[1:].partition("]")
        port_text = port_text.lstrip(":")
    else:
        host, port_text = h.split(":") if h.count(":") == 1 else (h, "")
    if not host:
        raise ConfigurationError("the JDBC URL has an empty host name")
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigurationError("invalid port in the JDBC URL: use host:port with a number 1-65535")
        return host, int(port_text)
    return host, None
