"""Which driver a process works for, and whether a recorded driver is provably gone.

Spark plans and commits a Python data source's writes in Python worker processes that the
driver's JVM starts (and restarts); the driver is that JVM. :func:`driver_identity` names
it by host, process id and start time (the start time tells a reused process id apart);
outside Spark (the recovery CLI, tests) the process itself is the driver.

:func:`provably_dead` answers True only for a driver on this host whose process is gone
(or whose id now belongs to a process started at another time). A driver on another host
is never declared dead: nothing here can prove it.
"""

from __future__ import annotations

import os
import socket
from typing import TypedDict

__all__ = ["DriverIdentity", "driver_identity", "identity_of", "process_identity", "provably_dead"]


class DriverIdentity(TypedDict):
    """A driver process: its host name, process id and start time (clock ticks since boot,
    from ``/proc``; 0 where ``/proc`` is not available)."""

    host: str
    pid: int
    started: int


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` from field 3 on (the command name, field 2, may hold
    spaces and parentheses: they follow the last ``)``); None when there is no such process,
    ``[]`` when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        return []
    return stat[stat.rindex(")") + 2:].split()


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if there is no such process
    (or only its zombie, which no longer runs: a killed process waits there until reaped)."""
    fields = _stat(pid)
    if fields is None or fields[:1] in (["Z"], ["X"]):
        return None
    return int(fields[19]) if fields else 0  # field 22 of stat(5), counted from field 3


def _is_jvm(pid: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "java"
    except OSError:
        return False


def _parent(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[1]) if fields else 0


def driver_identity() -> DriverIdentity:
    """The driver this process works for: the nearest ancestor that is a JVM (Spark's driver,
    for the Python workers that plan and commit writes), else this process."""
    pid = os.getpid()
    candidate = _parent(pid)
    while candidate > 1:
        if _is_jvm(candidate):
            pid = candidate
            break
        candidate = _parent(candidate)
    return DriverIdentity(host=socket.gethostname(), pid=pid, started=_start_ticks(pid) or 0)


def identity_of(pid: int) -> DriverIdentity:
    """Process *pid* of this host (the driver's JVM, for twopc's query listener, which runs in
    the Python process that started it)."""
    return DriverIdentity(host=socket.gethostname(), pid=pid, started=_start_ticks(pid) or 0)


def process_identity() -> DriverIdentity:
    """This process itself (not the driver it works for): what a task's Python worker records
    so that a driver on the same host can tell when it is gone."""
    return identity_of(os.getpid())


def provably_dead(identity: DriverIdentity) -> bool:
    """True when *identity* is a process (a driver, a task's worker) on this host that no
    longer runs."""
    if identity.get("host") != socket.gethostname() or not os.path.isdir("/proc/self"):
        return False
    started = _start_ticks(int(identity["pid"]))
    if started is None:
        return True
    return bool(identity.get("started")) and started not in (0, identity["started"])
