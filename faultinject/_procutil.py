"""Process-group/session helpers (Linux ``/proc``; falls back to ``killpg`` elsewhere)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Iterable

from ._proctree import process_table


def members(*, pgid: int | None = None, sid: int | None = None) -> list[int]:
    """Live (non-zombie) pids in process group ``pgid`` and/or session ``sid``."""
    return [pid for pid, found in process_table().items() if found.pgrp == pgid or found.session == sid]


def kill_tree(leader: int, *, timeout_s: float = 10.0) -> None:
    """SIGKILL the group and session led by *leader* and wait until gone (not what left the session). Never raises."""
    me = os.getpid()
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(OSError):
            os.killpg(leader, signal.SIGKILL)
        left = [p for p in members(pgid=leader, sid=leader) if p != me]
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.05)


def first_executable(candidates: Iterable[str | None]) -> str | None:
    """The first of *candidates* that is an executable file (None and empty ones skipped)."""
    return next((c for c in candidates if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def log_tail(path: str, lines: int = 30) -> str:
    """The last ``lines`` lines of a text file, or a note if it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"
