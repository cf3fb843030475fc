"""Which driver a process works for (the JVM that starts Spark's Python workers, else the process
itself), named by host, pid and start time (which tells a reused pid apart), and whether a
recorded one is provably gone: only on this host (another host's cannot be proved dead)."""

from __future__ import annotations

import os
import socket
from typing import TypedDict

__all__ = ["DriverIdentity", "driver_identity", "identity_of", "process_identity", "provably_dead"]


class DriverIdentity(TypedDict):
    """A process: host name, pid and start time (clock ticks since boot; 0 without ``/proc``)."""

    host: str
    pid: int
    started: int


def _stat(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat``'s fields from field 3 on (after the last ``)``); None: no such process,
    ``[]``: unreadable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        return []
    return stat[stat.rindex(")") + 2:].split()


def _start_ticks(pid: int) -> int | None:
    """The process's start time in ticks, or None if it is gone (or only its zombie remains)."""
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
    """The nearest ancestor JVM (Spark's driver), else this process."""
    pid = os.getpid()
    candidate = _parent(pid)
    while candidate > 1:
        if _is_jvm(candidate):
            pid = candidate
            break
        candidate = _parent(candidate)
    return identity_of(pid)


def identity_of(pid: int) -> DriverIdentity:
    """Process *pid* of this host."""
    return DriverIdentity(host=socket.gethostname(), pid=pid, started=_start_ticks(pid) or 0)


def process_identity() -> DriverIdentity:
    """This process itself (what a task's worker records)."""
    return identity_of(os.getpid())


def provably_dead(identity: DriverIdentity) -> bool:
    """True when *identity* is a process on this host that no longer runs."""
    if identity.get("host") != socket.gethostname() or not os.path.isdir("/proc/self"):
        return False
    if (started := _start_ticks(int(identity["pid"]))) is None:
        return True
    return bool(identity.get("started")) and started not in (0, identity["started"])
