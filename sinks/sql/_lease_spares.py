"""Spare lease holders: a write's lease holder (:mod:`sinks.sql._lease_holder`) costs an
interpreter's start and the database driver's import, about 0.2 s on two quiet cores,
which the first measured ``make bench`` showed as most of a small drop-in write's extra
time. So each write also starts, in the background, one *spare* holder for the driver's
next write: it imports the driver and waits on a unix socket; the next write claims it and
sends it the line it would have sent a fresh holder. The first write of a driver still
starts its holder itself.

The spares of one driver and database driver module live in a folder of their own,
``<tmp>/twopc-lease-spares-<uid>/<key>``, made ``0700`` and checked to be the user's own
(the line carries credentials; only the user's processes can connect). A spare listens at
``<pid>.sock``; a write claims it by renaming that to ``<pid>.claimed`` (one rename wins),
then connects. A spare whose socket refuses (it died) is removed and the next one tried;
with none, the write starts a holder as before. A spare ends when its driver is gone or
after :data:`SPARE_IDLE_SECONDS` unclaimed, so a driver keeps at most a few idle
processes for ten minutes after its last write; what killed spares leave (their socket
files, empty folders) is swept by the next write of any driver.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import pickle
import signal
import socket
import subprocess
import time
from pathlib import Path

from twopc.spi import DriverIdentity, private_dir

from . import _lease_holder

__all__ = ["SPARE_IDLE_SECONDS", "ask_spare", "spare_folder", "start_spare"]

#: how long a spare waits for a write before it ends
SPARE_IDLE_SECONDS = 600.0
_MAX_SOCKET_PATH = 100  # AF_UNIX paths hold 108 bytes


def spare_folder(driver: DriverIdentity, module: str) -> Path | None:
    """The private folder of *driver*'s spares for DB-API *module*, created when missing;
    None when it cannot be made safe (not a folder of this user's alone, a path too long
    for a unix socket): writes then start their holders themselves."""
    key = hashlib.sha256(json.dumps([dict(driver), module], sort_keys=True).encode()).hexdigest()[:16]
    folder = private_dir("twopc-lease-spares", key)
    if folder is None:
        return None
    _sweep(folder.parent, keep=folder)
    return folder if len(str(folder / "4194304.sock.new")) <= _MAX_SOCKET_PATH else None


def _sweep(root: Path, *, keep: Path) -> None:
    """Remove what killed spares left: sockets whose process is gone, then folders that
    stayed empty for a minute (a spare's folder is made just before it starts)."""
    now = time.time()
    with contextlib.suppress(OSError):
        for folder in root.iterdir():
            for sock in folder.glob("*.sock"):
                if sock.stem.isdigit() and not os.path.exists(f"/proc/{sock.stem}") and os.path.isdir("/proc/self"):
                    with contextlib.suppress(OSError):
                        sock.unlink()
            if folder != keep and now - folder.stat().st_mtime > 60:
                with contextlib.suppress(OSError):
                    folder.rmdir()  # only when empty


def ask_spare(folder: Path, payload: str, timeout: float) -> tuple[int, list[str]] | None:
    """Claim a waiting spare in *folder*, send it *payload* (one line) and return its pid
    and its answer's words (``held <session>``, ``busy``, ``error <kind>``); None when no
    spare answered (the write then starts a holder itself)."""
    for path in sorted(folder.glob("*.sock"), key=lambda p: (len(p.stem), p.stem)):  # pid order
        try:
            pid = int(path.stem)
        except ValueError:
            continue
        claimed = folder / f"{pid}.claimed"
        try:
            os.rename(path, claimed)  # one write wins a spare
        except OSError:
            continue
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(timeout)
        try:
            conn.connect(str(claimed))
        except OSError:  # it died: its socket file stayed behind
            conn.close()
            with contextlib.suppress(OSError):
                claimed.unlink()
            continue
        try:
            with conn, conn.makefile("rw", encoding="ascii") as channel:
                channel.write(payload + "\n")
                channel.flush()
                words = channel.readline().split()
        except OSError:
            words = []
        if not words:  # it ended (its idle time ran out as it was claimed), or is wedged: it holds
            _kill_if_spare(pid)  # no lock (a holder answers as soon as it has one), so try another
            with contextlib.suppress(OSError):
                claimed.unlink()
            continue
        return pid, words
    return None


def _kill_if_spare(pid: int) -> None:
    """SIGKILL *pid* if it still runs the lease holder's file (its command line says so)."""
    holder = os.fsencode(_lease_holder.__file__)
    with contextlib.suppress(OSError):
        if holder in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
            os.kill(pid, signal.SIGKILL)


def start_spare(argv: list[str], folder: Path, *, driver: DriverIdentity, module: str,
                bound_seconds: float) -> int | None:
    """Start one spare holder in *folder* unless one waits there already (not waited for:
    it lives until a write claims it, its driver ends, or it idles out); its pid, or None
    when none was started. Never raises."""
    if any(folder.glob("*.sock")):
        return None
    line = base64.b64encode(pickle.dumps({"spare": {
        "folder": str(folder), "module": module, "driver": dict(driver), "bound_seconds": bound_seconds,
        "idle_seconds": SPARE_IDLE_SECONDS}})).decode()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, text=True, close_fds=True)
        assert proc.stdin is not None
        with contextlib.suppress(OSError):
            proc.stdin.write(line + "\n")
            proc.stdin.close()
    except OSError:
        return None
    return proc.pid
