"""A throwaway process dies with the process that started it, however that one ends.

``Lifeline(pid)`` starts a watchdog (a site-less Python in a session of its own, out of the
runner's group that a Ctrl-C ends) that waits until *pid* or the lifeline's maker (its runner)
ends. When the runner ends first (skipped ``atexit``, SIGTERM, SIGKILL, the OOM killer), it
SIGKILLs *pid*, its descendants and the groups they lead (``kill_job``).

Not ``PR_SET_PDEATHSIG``: Linux sends it when the forking *thread* ends (fault plans restart
servers from threads), and only to the server, not what it forks into other sessions.
Linux only (pidfds, else polling every 0.2 s; a reused pid told apart by its start time);
elsewhere it does nothing. The watchdog runs this file by path: standard library and
``_proctree`` only."""

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
        """Stop watching *pid* (it ended, or someone else answers for it): end the watchdog. Idempotent."""
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            with contextlib.suppress(OSError):
                watchdog.kill()
            watchdog.wait()


def _pidfd(pid: int, start: int, start_time: Callable[[int], int | None]) -> int | None:
    """A pidfd of *pid* if it is still the process started at *start*, else None; OSError without pidfds."""
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
    if None in fds:
        return fds.index(None)
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
