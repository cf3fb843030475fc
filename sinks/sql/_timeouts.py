"""Bounded waits on every SQL connection twopc opens, since a half-open connection would block the driver for ever:
``connectTimeout`` for the connect; ``socketTimeout`` for each reply (drivers without it run each statement under a
deadline that shuts the socket down, see :func:`reply_deadline`; a ``COPY`` stream is bounded by TCP only); TCP
keepalive (30 s idle, every 10 s, 3 probes) and ``tcp_user_timeout`` on Linux."""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

__all__ = ["reply_deadline"]

log = logging.getLogger("twopc.sinks.sql")


@dataclass(slots=True, order=True)
class Deadline:
    """One armed :func:`reply_deadline`: whether it passed (and shut its socket down)."""

    when: float
    fd: int = field(compare=False)
    fired: bool = field(default=False, compare=False)
    done: bool = field(default=False, compare=False)


class _Watchdog:
    """One daemon thread per process firing every connection's deadlines (cheaper than one per statement)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[Deadline] = []
        self._pid = -1

    def arm(self, fd: int, seconds: float) -> Deadline:
        d = Deadline(time.monotonic() + seconds, fd)
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child: the thread is not ours
                self._heap = []
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="twopc-reply-deadlines", daemon=True).start()
            if len(self._heap) >= _COMPACT_AT:  # disarmed deadlines wait for their time: drop them now
                self._heap = [x for x in self._heap if not x.done]
                heapq.heapify(self._heap)
            heapq.heappush(self._heap, d)
            if self._heap[0] is d:
                self._cond.notify()
        return d

    def disarm(self, d: Deadline) -> None:
        with self._cond:
            d.done = True  # left in the heap; skipped when it comes up

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0].when > time.monotonic():
                    self._cond.wait(max(0.0, self._heap[0].when - time.monotonic()) if self._heap else None)
                d = heapq.heappop(self._heap)
                if d.done:
                    continue
                d.fired = True
            _shut_down(d.fd)


def _shut_down(fd: int) -> None:
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        log.debug("twopc: shutting down a connection past its deadline failed", exc_info=True)


_COMPACT_AT = 1024
_WATCHDOG = _Watchdog()


@contextlib.contextmanager
def reply_deadline(fileno: Callable[[], int], seconds: float) -> Iterator[Deadline]:
    """Shut down (not close) the socket ``fileno()`` names if the block runs longer than *seconds*,
    so a driver blocked on a reply raises; a block that ends first disarms the deadline."""
    d = _WATCHDOG.arm(fileno(), seconds)
    try:
        yield d
    finally:
        _WATCHDOG.disarm(d)
