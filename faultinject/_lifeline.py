"""A throwaway process dies with the process that started it, however that one ends.

``Lifeline(pid)`` starts a watchdog beside process *pid* (a server, a crash drill's job): a
Python interpreter without site packages, in a session of its own, that waits until either
*pid* or the process that made the lifeline (its *runner*) ends. When the runner ends first
(a normal exit that skipped its ``atexit`` hooks, an exception, SIGTERM, SIGKILL, the OOM
killer), the watchdog SIGKILLs *pid*, everything descending from it and the process groups
they lead (``kill_job``). When *pid* ends first, the watchdog exits. Its own session keeps it
out of the runner's process group, which a Ctrl-C or a ``kill -- -PGID`` ends all at once.

Why not a parent-death signal (``prctl(PR_SET_PDEATHSIG)``) on the server: Linux sends it when
the *thread* that forked the server ends, and fault plans restart servers from threads of
their own; and it reaches the server only, not the backends, workers and executors that a
server forks into groups and sessions of their own.

Linux only: the watchdog waits on pidfds (Linux 5.3+; else it looks every 0.2 s) and tells a
process from a later one with the same pid by its start time in ``/proc``. Elsewhere
``Lifeline`` does nothing. The watchdog runs this file by its path, without the package: it
imports nothing but the standard library and ``_proctree`` beside it.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import select
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Lifeline"]

_POLL_S = 0.2


class Lifeline:
    """A watchdog that SIGKILLs process *pid* and what descends from it when this process
    ends first; :meth:`release` once *pid* ended (or to stop watching it)."""

    def __init__(self, pid: int) -> None:
        from ._proctree import start_time
        self.pid = pid
        self._watchdog: subprocess.Popen[bytes] | None = None
        runner, target = start_time(os.getpid()), start_time(pid)
        if runner is None or target is None:  # no /proc (not Linux), or pid already gone
            return
        self._watchdog = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__),
             str(os.getpid()), str(runner), str(pid), str(target)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True, close_fds=True)

    def release(self) -> None:
        """Stop watching *pid* (it ended, or someone else answers for it now): end the
        watchdog. Idempotent."""
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            with contextlib.suppress(OSError):
                watchdog.kill()
            watchdog.wait()


# -- the watchdog process ---------------------------------------------------------------------

def _pidfd(pid: int, start: int, start_time: Callable[[int], int | None]) -> int | None:
    """A pidfd of *pid* if it is still the process that started at *start*, else None.
    Raises OSError where pidfds are not supported."""
    fd = os.pidfd_open(pid)
    if start_time(pid) != start:  # checked after opening: the fd is of the process checked
        os.close(fd)
        return None
    return fd


def _wait_either(procs: Sequence[tuple[int, int]], start_time: Callable[[int], int | None]) -> int:
    """Wait until one of *procs* (pid, start time) is gone; its index."""
    try:
        fds = [_pidfd(pid, start, start_time) for pid, start in procs]
    except OSError:  # no pidfd_open (Linux < 5.3): look again and again
        while True:
            for i, (pid, start) in enumerate(procs):
                if start_time(pid) != start:
                    return i
            time.sleep(_POLL_S)
    for i, fd in enumerate(fds):
        if fd is None:
            return i
    poll = select.poll()
    for fd in fds:
        assert fd is not None
        poll.register(fd, select.POLLIN)
    ready = poll.poll()
    return next(i for i, fd in enumerate(fds) if fd == ready[0][0])


def _watch(argv: Sequence[str]) -> int:
    runner, runner_start, target, target_start = (int(a) for a in argv)
    tree: dict[str, Any] = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_proctree.py"))
    start_time: Callable[[int], int | None] = tree["start_time"]
    gone = _wait_either([(runner, runner_start), (target, target_start)], start_time)
    if gone == 0 and start_time(target) == target_start:
        tree["kill_job"]([target])
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(_watch(sys.argv[1:]))
