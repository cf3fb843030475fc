"""TCP keepalive timing of every connection the sinks open: a dead peer is noticed after about a minute."""

from __future__ import annotations

import socket

__all__ = ["KEEPALIVE_COUNT", "KEEPALIVE_IDLE_S", "KEEPALIVE_INTERVAL_S", "keepalive_socket_options"]

KEEPALIVE_IDLE_S = 30  #: seconds of silence before the first keepalive probe
KEEPALIVE_INTERVAL_S = 10  #: seconds between probes
KEEPALIVE_COUNT = 3  #: unanswered probes before the connection is declared dead


def keepalive_socket_options() -> dict[int, int]:
    """``{TCP_KEEPIDLE: 30, TCP_KEEPINTVL: 10, TCP_KEEPCNT: 3}`` (those this platform has)."""
    names = (("TCP_KEEPIDLE", KEEPALIVE_IDLE_S), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
             ("TCP_KEEPCNT", KEEPALIVE_COUNT))
    return {getattr(socket, n): v for n, v in names if hasattr(socket, n)}
