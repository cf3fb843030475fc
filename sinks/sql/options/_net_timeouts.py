"""The waits of one engine's connections, as the options set them (``connectTimeout``,
``socketTimeout``, ``tcpKeepAlive``); :mod:`twopc.sinks.sql.connect._timeouts` enforces the reply
wait, and each registered dialect turns them into its driver's connect arguments."""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass

from ..._net import keepalive_socket_options

__all__ = ["NetTimeouts"]


@dataclass(frozen=True)
class NetTimeouts:
    """The waits of one engine's connections.

    Attributes:
        connect: connect timeout, whole seconds.
        reply: how long a statement waits for its reply (``socketTimeout``), seconds (> 0).
        keepalive: whether TCP keepalive probes are sent.
    """

    connect: int
    reply: float
    keepalive: bool = True

    def tune_socket(self, sock: socket.socket | None) -> None:
        """Set keepalive timing and ``TCP_USER_TIMEOUT`` on a connected TCP socket (for
        drivers without parameters for them: PyMySQL). Unix sockets are left alone."""
        if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return
        with contextlib.suppress(OSError):  # an option the platform lacks: the other waits still hold
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, int(self.keepalive))
            if self.keepalive:
                for opt, value in keepalive_socket_options().items():
                    sock.setsockopt(socket.IPPROTO_TCP, opt, value)
            if hasattr(socket, "TCP_USER_TIMEOUT"):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(self.reply * 1000))
