"""A TCP proxy that injects network faults between a client and a server (stdlib asyncio).

Tests put a :class:`FaultProxy` between Spark (or a sink) and a real server and arm resets,
latency, blackholes or a swallowed reply while traffic flows, on the proxy (every connection,
present and future) or on one :class:`ProxyConnection`. Directions are ``"upstream"`` (client to
server), ``"downstream"`` and ``"both"``. The event loop runs in a daemon thread; methods are
called from the test's thread."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import socket
import struct
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

log = logging.getLogger("twopc.faultinject.proxy")

Direction: TypeAlias = Literal["upstream", "downstream", "both"]
_DIRECTIONS: dict[str, tuple[str, ...]] = {"upstream": ("upstream",), "downstream": ("downstream",),
                                          "both": ("upstream", "downstream")}
_CHUNK = 65536


def _directions(direction: str) -> tuple[str, ...]:
    try:
        return _DIRECTIONS[direction]
    except KeyError:
        raise ValueError(f"direction must be upstream, downstream or both, got {direction!r}") from None


class _Faults:
    """The faults armed on one scope: the proxy (every connection, present and future) or one connection."""

    def __init__(self) -> None:
        self._latency: dict[str, float] = {}
        self._blackhole_until: dict[str, float] = {}

    def blackhole(self, direction: Direction = "both", seconds: float | None = None) -> None:
        """Drop every byte in *direction* for *seconds* (``None``: until :meth:`heal`); connections stay
        open, clients see a stalled peer."""
        until = math.inf if seconds is None else time.monotonic() + seconds
        for d in _directions(direction):
            self._blackhole_until[d] = until

    def add_latency(self, seconds: float, direction: Direction = "both") -> None:
        """Delay each chunk in *direction* by *seconds*."""
        for d in _directions(direction):
            self._latency[d] = seconds

    def heal(self) -> None:
        """Remove the faults armed here (a swallowed reply stays lost)."""
        self._latency.clear()
        self._blackhole_until.clear()

    def _delay(self, direction: str) -> float:
        return self._latency.get(direction, 0.0)

    def _dropping(self, direction: str, now: float) -> bool:
        return self._blackhole_until.get(direction, 0.0) > now


@dataclass
class _Swallow:
    pattern: bytes
    remaining: float  # math.inf: every match


class ProxyConnection(_Faults):
    """One client connection through the proxy, with its own faults.

    *id* counts clients from 1 in connection order; *bytes_up*/*bytes_down* are the bytes forwarded
    to the server/client; *round_trips* counts the client's sends after an answer (the first
    request counts), *swallowing* says the server's replies on it are being dropped."""

    def __init__(self, proxy: FaultProxy, conn_id: int, client: asyncio.StreamWriter,
                 server: asyncio.StreamWriter) -> None:
        super().__init__()
        self.id = conn_id
        self.bytes_up = 0
        self.bytes_down = 0
        self.round_trips = 0
        self.swallowing = False
        self._last_direction = "downstream"
        self._proxy = proxy
        self._client = client
        self._server = server
        self._tail = b""  # the end of the last upstream chunk, for patterns split across chunks

    def __repr__(self) -> str:
        return (f"ProxyConnection({self.id}, up={self.bytes_up}, down={self.bytes_down}, "
                f"round_trips={self.round_trips}, swallowing={self.swallowing})")

    def reset(self) -> None:
        """Close this connection with a TCP RST on both sides."""
        self._proxy._call(self._reset)

    async def _reset(self) -> None:
        for writer in (self._client, self._server):
            _abort_with_rst(writer)


def _abort_with_rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):  # the socket may be closed already
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy(_Faults):
    """A TCP proxy from ``listen_host:listen_port`` (loopback; port 0 picks a free one, see
    :attr:`port`) to ``upstream_host:upstream_port``, with faults armed from tests.

    A context manager, or :meth:`start` and :meth:`stop`. *swallowed* and *resets* count the
    replies swallowed and the connections reset so far."""

    def __init__(self, upstream_host: str, upstream_port: int, *, listen_host: str = "127.0.0.1",
                 listen_port: int = 0) -> None:
        super().__init__()
        self.upstream = (upstream_host, upstream_port)
        self.listen_host = listen_host
        self.port = listen_port
        self.swallowed = 0
        self.resets = 0
        self._swallow: list[_Swallow] = []
        self._conns: dict[int, ProxyConnection] = {}
        self._ids = itertools.count(1)
        self.accepted = 0
        """How many client connections the proxy has accepted so far (closed ones included)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._lock = threading.Lock()

    def start(self) -> FaultProxy:
        """Listen and forward in a daemon thread; returns *self*. OSError when the port cannot be bound."""
        if self._loop is not None:
            return self
        loop = asyncio.new_event_loop()
        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
        self._thread = threading.Thread(target=run, name=f"faultproxy->{self.upstream[1]}", daemon=True)
        self._thread.start()
        try:
            self._server = asyncio.run_coroutine_threadsafe(
                asyncio.start_server(self._accept, self.listen_host, self.port), loop).result()
        except OSError:
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join()
            raise
        self.port = self._server.sockets[0].getsockname()[1]
        self._loop = loop
        return self

    def stop(self) -> None:
        """Close the listener and every connection (RST), stop the thread. Idempotent."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for conn in list(self._conns.values()):
                await conn._reset()
        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def connections(self) -> list[ProxyConnection]:
        """The open connections, oldest first."""
        with self._lock:
            return [self._conns[k] for k in sorted(self._conns)]

    def swallow_reply(self, pattern: bytes | str, times: int | None = 1) -> None:
        """Forward the next request containing *pattern* (*times* of them; ``None``: until :meth:`heal`),
        then drop all the server sends back on that connection: the reply lost, the connection half-open."""
        raw = pattern.encode() if isinstance(pattern, str) else pattern
        if not raw:
            raise ValueError("swallow_reply needs a non-empty pattern")
        self._swallow.append(_Swallow(raw, math.inf if times is None else times))

    def reset(self) -> int:
        """Reset every open connection (TCP RST to both sides). Returns how many."""
        conns = self.connections()
        for conn in conns:
            conn.reset()
        return len(conns)

    def heal(self) -> None:
        """Remove every armed fault, the proxy's and each connection's (swallowed replies stay lost)."""
        super().heal()
        self._swallow.clear()
        for conn in self.connections():
            conn.heal()

    def arm(self, fault: str, **params: Any) -> None:
        """Arm a fault by name, for fault plans: ``reset``, ``blackhole`` (``direction``, ``seconds``),
        ``latency`` (``seconds``, ``direction``), ``swallow_reply`` (``pattern``, ``times``), ``heal``;
        ValueError for another name."""
        actions: dict[str, Callable[..., Any]] = {
            "reset": self.reset, "blackhole": self.blackhole, "latency": self.add_latency,
            "swallow_reply": self.swallow_reply, "heal": self.heal,
        }
        action = actions.get(fault)
        if action is None:
            raise ValueError(f"unknown proxy fault {fault!r}: use one of {', '.join(sorted(actions))}")
        action(**params)

    def _call(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        loop = self._loop
        if loop is None:
            return
        fut = asyncio.run_coroutine_threadsafe(fn(), loop)
        fut.result(timeout=10)
        self.resets += 1

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            _abort_with_rst(client_w)
            return
        conn = ProxyConnection(self, next(self._ids), client_w, server_w)
        with self._lock:
            self._conns[conn.id] = conn
            self.accepted = conn.id
        try:
            pumps = [asyncio.ensure_future(self._pump(conn, client_r, server_w, "upstream")),
                     asyncio.ensure_future(self._pump(conn, server_r, client_w, "downstream"))]
            _done, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            for writer in (client_w, server_w):
                writer.transport.abort() if writer.transport.is_closing() else writer.close()
        finally:
            with self._lock:
                self._conns.pop(conn.id, None)

    def _matches(self, conn: ProxyConnection, data: bytes) -> bool:
        window = conn._tail + data
        longest = max((len(s.pattern) for s in self._swallow), default=1)
        conn._tail = window[-(longest - 1):] if longest > 1 else b""
        for rule in list(self._swallow):
            if rule.remaining > 0 and rule.pattern in window:
                rule.remaining -= 1
                return True
        return False

    async def _pump(self, conn: ProxyConnection, src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                    direction: str) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while True:
                data = await src.read(_CHUNK)
                if not data:
                    return
                delay = max(self._delay(direction), conn._delay(direction))
                if delay > 0:
                    await asyncio.sleep(delay)
                now = time.monotonic()
                if self._dropping(direction, now) or conn._dropping(direction, now):
                    continue
                if direction == "downstream" and conn.swallowing:
                    continue
                if direction == "upstream" and self._swallow and self._matches(conn, data):
                    conn.swallowing = True
                    self.swallowed += 1
                    log.info("faultinject proxy: connection %s: forwarding a request, swallowing its reply", conn.id)
                if direction == "upstream":
                    conn.bytes_up += len(data)
                    conn.round_trips += conn._last_direction == "downstream"
                else:
                    conn.bytes_down += len(data)
                conn._last_direction = direction
                dst.write(data)
                await dst.drain()
