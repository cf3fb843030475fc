"""A job's processes as ``/proc`` shows them: who a process is (its start time, so a reused pid is
never taken for it), what descends from it, and SIGKILLing all of that. Standard library only
(every process loads it); without ``/proc`` nothing has a start time or descendants."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from typing import NamedTuple


class Stat(NamedTuple):
    """The fields of ``/proc/<pid>/stat`` a job needs: parent, group, session, start time."""

    ppid: int
    pgrp: int
    session: int
    start: int


def stat(pid: int) -> Stat | None:
    """The live (non-zombie) process *pid*'s :class:`Stat`, or None if it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()  # field 3 (state) onwards: the name may hold spaces
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    try:
        return Stat(int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))
    except ValueError:
        return None


def start_time(pid: int) -> int | None:
    """When *pid* started (clock ticks since boot), or None if it is gone or unreadable."""
    found = stat(pid)
    return None if found is None else found.start


def boot_id() -> str:
    """This boot (``/proc/sys/kernel/random/boot_id``, else the host name): pids mean something only within it."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return "host:" + os.uname().nodename


def process_table() -> dict[int, Stat]:
    """Every live process's :class:`Stat`, by pid."""
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return {}
    return {pid: found for pid in pids if (found := stat(pid)) is not None}


def descendants(roots: Iterable[int]) -> tuple[set[int], dict[int, Stat]]:
    """The live *roots* and their live descendants, with the process table they were found in."""
    table = process_table()
    children: dict[int, list[int]] = {}
    for pid, found in table.items():
        children.setdefault(found.ppid, []).append(pid)
    seen: set[int] = set()
    todo = [pid for pid in roots if pid in table]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, ()))
    return seen, table


def kill_job(roots: Iterable[int]) -> set[int]:
    """SIGKILL *roots*, their descendants and the groups one of them leads (never this process and
    its group, nor a group the job merely runs in); returns the pids found. Roots go first (a dead
    JVM starts no new worker); a second look catches what was forked in between."""
    me, own = os.getpid(), os.getpgrp()
    roots = [pid for pid in roots if pid != me]
    found: set[int] = set()
    for _ in range(2):
        job, table = descendants([*roots, *found, me])
        job.discard(me)
        new = job - found
        ordered = [pid for pid in roots if pid in new] + sorted(new.difference(roots))
        for pid in ordered:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        leaders = {table[pid].pgrp for pid in job | {me} if pid in table} & (job | {me})
        for pgid in leaders - {own}:
            with contextlib.suppress(OSError):
                os.killpg(pgid, signal.SIGKILL)
        found |= job
        if not new:
            break
    return found
