"""Redis connections of the Redis sink and the Redis Stream source: one client per
process, URL, password and timeouts.

The sink and the source pickle to executors with configuration only; each process opens
its clients lazily here, learns once per client whether the server is a cluster
(``INFO cluster``) and then uses ``redis.cluster.RedisCluster``. A forked process starts with no clients.
:func:`dispose_clients` closes them all. The password never reaches a message: every
server error goes through :meth:`ClientConfig.error`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

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
    """redis-py's version, given to each client so that a new connection does not look it up in
    the installed distributions (a scan of every sys.path entry, the zip files on a Spark
    worker's included): as ``driver_info`` where redis-py has ``DriverInfo``, else as ``lib_version``."""
    driver_info = getattr(redis, "DriverInfo", None)
    if driver_info is not None:
        return {"driver_info": driver_info(lib_version=redis.__version__)}
    return {"lib_version": redis.__version__}


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
        """The :class:`~twopc.SinkError` for *exc*, raised while trying to *action*:
        :class:`~twopc.spi.SinkUnavailableError` for a refused login or an unreachable server."""
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
        """:meth:`call`, but None when the server refuses with a reply that says *refusal*
        (lower case: ``no such key``)."""
        try:
            return fn(self.pooled().client)
        except rex.RedisError as exc:
            if isinstance(exc, rex.ResponseError) and refusal in str(exc).lower():
                return None
            raise self.error(exc, action) from None

    def with_library(self, load: Callable[..., None], fn: Callable[[], T], action: str, library: str) -> T:
        """``fn()`` once *load* made sure the server has the library, and once more after
        ``load(force=True)`` when the server lost it (:func:`.library.missing_library`).

        Raises:
            SinkUnavailableError / SinkError: the server failed, or lost *library* twice.
        """
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
        """This process's client for this configuration (opened on first use).

        Raises:
            ConfigurationError: the URL is not usable.
            SinkUnavailableError / SinkError: the server could not say whether it is a cluster.
        """
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
                                  **_version_given()}
        if self.password is not None:
            kwargs["password"] = self.password
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
        """``load(pooled)`` (a server-side library, known as *key*) once per process and server
        until :func:`dispose_clients`, again with *force*; a Redis error raised as :meth:`error`'s."""
        if (self.url, key) not in _LOADED or force:
            self.call(action, lambda _: load(self.pooled()))
            _LOADED.add((self.url, key))


class _LocalFcallKeys:
    """redis-py's cluster command parser, except that the keys of ``FCALL``/``FCALL_RO``
    are read from the command itself (``FCALL name numkeys key...``), as redis-py already
    does for ``EVAL``/``EVALSHA``.

    redis-py (8.x) asks the cluster's default node (the URL's) ``COMMAND GETKEYS`` for every
    ``FCALL``, before its retry loop. Once that node is down, every ``FCALL`` fails with
    "connection refused" although the slot has a new master, and the client never moves
    off the dead node; it also costs a round trip per call. Shared with the client's
    pipelines, which take the parser from the client.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def get_keys(self, redis_conn: Any, *args: Any) -> list[Any] | None:
        """The keys of command *args* (``None``: it has none)."""
        if len(args) >= 3 and str(args[0]).upper() in ("FCALL", "FCALL_RO"):
            return list(args[3: 3 + int(args[2])]) or None
        keys: list[Any] | None = self._inner.get_keys(redis_conn, *args)
        return keys

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass(frozen=True)
class Pooled:
    """A pooled client and whether its server is a cluster."""

    client: Any  # redis.Redis or redis.cluster.RedisCluster (their command methods are untyped)
    cluster: bool

    def on_every_primary(self, call: Callable[[Any], object]) -> None:
        """Run ``call(client)`` on the server, or on every primary of a cluster (where a
        server-side library must be loaded). ``call`` must be safe to repeat: when a node
        the client took for a primary answers that it is a replica (the client's map is
        older than a failover), the client reads the topology again and every primary is
        called once more.

        Raises:
            redis.exceptions.RedisError: a server failed, or refused twice as a replica.
        """
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
    """The URL without its password, and the password (percent-decoded; a ``password``
    query parameter wins over the user info).

    Raises:
        ConfigurationError: not a ``redis://`` or ``rediss://`` URL (the message never
            shows the URL).
    """
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
    netloc = u.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if u.port is not None:
        netloc += f":{u.port}"
    if u.username:
        netloc = f"{u.username}@{netloc}"
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
