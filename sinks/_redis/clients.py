"""Redis connections: one client per process and configuration, opened lazily (a cluster,
told by ``INFO cluster``, gets ``RedisCluster``; a forked process starts with none). Every
server error goes through :meth:`ClientConfig.error`, which never shows the password.
"""

from __future__ import annotations

import contextlib
import os
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import redis
import redis.exceptions as rex

from twopc import ConfigurationError, SinkError
from twopc.spi import SinkUnavailableError, redact

from .._net import keepalive_socket_options
from .._secrets import after_password, secret_forms
from .library import missing_library

__all__ = ["ClientConfig", "Pooled", "dispose_clients", "split_url"]

T = TypeVar("T")


def _version_given() -> dict[str, Any]:
    """redis-py's version for each client, so a new connection does not scan sys.path for it."""
    driver_info = getattr(redis, "DriverInfo", None)
    return {"lib_version": redis.__version__} if driver_info is None else {
        "driver_info": driver_info(lib_version=redis.__version__)}


@dataclass(frozen=True)
class ClientConfig:
    """Where and how to connect: *url* holds no password (see :func:`split_url`)."""

    url: str
    password: str | None = field(repr=False)
    socket_timeout: float
    connect_timeout: float

    def where(self) -> str:
        """``host:port/db``, for messages."""
        u = urllib.parse.urlsplit(self.url)
        return f"{u.hostname or 'localhost'}:{u.port or 6379}{u.path or ''}"

    def redact(self, text: str) -> str:
        """*text* with every spelling of the password replaced by ``***``."""
        return redact(text, secret_forms([self.password])) if self.password else text

    def error(self, exc: BaseException, action: str) -> SinkError:
        """The SinkError for *exc* while trying to *action* (SinkUnavailableError: login refused, unreachable)."""
        text = self.redact(" ".join(str(exc).split()))
        if isinstance(exc, rex.AuthenticationError | rex.AuthorizationError):
            return SinkUnavailableError(f"Redis at {self.where()} refused the login while trying to {action}: "
                                        f"{text}; check the password option")
        if isinstance(exc, rex.ConnectionError | rex.TimeoutError | rex.BusyLoadingError):
            return SinkUnavailableError(f"cannot reach Redis at {self.where()} while trying to {action}: {text}")
        return SinkError(f"Redis at {self.where()} failed to {action}: {text}")

    def call(self, action: str, fn: Callable[[Any], T]) -> T:
        """``fn(client)`` with this process's client, a Redis error raised as :meth:`error`'s."""
        try:
            return fn(self.pooled().client)
        except rex.RedisError as exc:
            raise self.error(exc, action) from None

    def call_unless(self, action: str, fn: Callable[[Any], T], refusal: str) -> T | None:
        """:meth:`call`, but None when the server's refusal says *refusal* (lower case)."""
        try:
            return fn(self.pooled().client)
        except rex.RedisError as exc:
            if isinstance(exc, rex.ResponseError) and refusal in str(exc).lower():
                return None
            raise self.error(exc, action) from None

    def with_library(self, load: Callable[..., None], fn: Callable[[], T], action: str, library: str) -> T:
        """``fn()`` after *load*, and once more after ``load(force=True)`` when the server lost the library."""
        load()
        for _ in (0, 1):
            try:
                return fn()
            except rex.RedisError as exc:
                if not missing_library(exc):
                    raise self.error(exc, action) from None
            load(force=True)
        raise SinkError(f"Redis at {self.where()}: the {library} vanished twice while trying to {action}")

    def pooled(self) -> Pooled:
        """This process's client for this configuration; ConfigurationError for an unusable URL."""
        global _PID
        with _LOCK:
            if os.getpid() != _PID:
                _CLIENTS.clear()
                _LOADED.clear()
                _PID = os.getpid()
            pooled = _CLIENTS.get(self)
            if pooled is None:
                pooled = _CLIENTS[self] = self._open()
            return pooled

    def _open(self) -> Pooled:
        kwargs: dict[str, Any] = {"socket_timeout": self.socket_timeout,
                                  "socket_connect_timeout": self.connect_timeout, "client_name": "twopc",
                                  "socket_keepalive": True, "socket_keepalive_options": keepalive_socket_options(),
                                  "password": self.password, **_version_given()}
        try:
            client: Any = redis.Redis.from_url(self.url, **kwargs)
        except (ValueError, rex.RedisError) as exc:
            raise ConfigurationError(f"url is not a usable Redis URL ({self.redact(str(exc))}): "
                                     f"use redis://host:port/db or rediss://host:port/db") from None
        try:
            cluster = bool(int(client.info("cluster").get("cluster_enabled", 0) or 0))
        except rex.RedisError as exc:
            client.close()
            raise self.error(exc, "read INFO cluster") from None
        if cluster:
            from redis.cluster import RedisCluster
            client.close()
            client = RedisCluster.from_url(self.url, **kwargs)
            client.commands_parser = _LocalFcallKeys(client.commands_parser)
        return Pooled(client, cluster)

    def load_once(self, key: str, load: Callable[[Pooled], object], action: str, *, force: bool = False) -> None:
        """``load(pooled)`` (library *key*) once per process and server, again with *force*."""
        if (self.url, key) not in _LOADED or force:
            self.call(action, lambda _: load(self.pooled()))
            _LOADED.add((self.url, key))


class _LocalFcallKeys:
    """redis-py's cluster command parser, but ``FCALL``'s keys are read from the command as for EVAL:
    redis-py 8 asks the default node ``COMMAND GETKEYS`` for each ``FCALL``, so once that node
    is down every ``FCALL`` fails although its slot has a new master."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def get_keys(self, redis_conn: Any, *args: Any) -> list[Any] | None:
        """The keys of command *args* (``None``: it has none)."""
        if len(args) >= 3 and str(args[0]).upper() in ("FCALL", "FCALL_RO"):
            return list(args[3: 3 + int(args[2])]) or None
        return cast("list[Any] | None", self._inner.get_keys(redis_conn, *args))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass(frozen=True)
class Pooled:
    """A pooled client and whether its server is a cluster."""

    client: Any  # redis.Redis or RedisCluster (untyped command methods)
    cluster: bool

    def on_every_primary(self, call: Callable[[Any], object]) -> None:
        """``call(client)`` on the server or every primary of a cluster; repeated on every primary
        once after a node answers that it is a replica (a failover), so it must be safe to repeat."""
        for attempt in (0, 1):
            nodes = ([self.client.get_redis_connection(n) for n in self.client.get_primaries()]
                     if self.cluster else [self.client])
            try:
                for node in nodes:
                    call(node)
                return
            except rex.ReadOnlyError:
                if not self.cluster or attempt:
                    raise
                self.client.nodes_manager.initialize()


_CLIENTS: dict[ClientConfig, Pooled] = {}
_LOADED: set[tuple[str, str]] = set()
_PID = os.getpid()
_LOCK = threading.Lock()


def dispose_clients() -> None:
    """Close every pooled Redis connection of this process."""
    with _LOCK:
        pooled = list(_CLIENTS.values())
        _CLIENTS.clear()
        _LOADED.clear()
    for p in pooled:
        with contextlib.suppress(Exception):  # closing is best effort: nothing to report
            p.client.close()


def split_url(url: str) -> tuple[str, str | None]:
    """The URL without its password, and the password (a ``password`` query parameter wins);
    ConfigurationError, never showing the URL, unless ``redis://`` or ``rediss://``."""
    raw = url.strip()
    try:
        u = urllib.parse.urlsplit(raw)
        _ = u.port
    except ValueError:
        raise ConfigurationError(
            "url is not a valid Redis URL: use redis://host:port/db or rediss://host:port/db (a password in "
            "it must be URL-encoded, / as %2F, ? as %3F, # as %23, @ as %40, or given as the password option)") \
            from None
    if u.scheme not in ("redis", "rediss"):
        raise ConfigurationError(f"url must start with redis:// or rediss://, got a {u.scheme or 'schemeless'!r} URL")
    password = urllib.parse.unquote(u.password) if u.password is not None else None
    host = u.hostname or ""
    netloc = ((f"{u.username}@" if u.username else "") + (f"[{host}]" if ":" in host else host)
              + ("" if u.port is None else f":{u.port}"))
    query = urllib.parse.parse_qsl(u.query, keep_blank_values=True)
    keys = [k.lower() for k, _ in query]
    if "password" in keys:
        at = keys.index("password")
        if at < len(query) - 1:  # a raw '&' in the password would make the rest a "parameter"
            raise ConfigurationError(after_password("Redis"))
        password = query[at][1]
        query = query[:at]
    clean = urllib.parse.urlunsplit((u.scheme, netloc, u.path, urllib.parse.urlencode(query), ""))
    return clean, password
