"""``python -P <this file>``: hold one writer's lease (a session lock, see
:mod:`sinks.sql.ledger._target_ledger`) for its driver.

Reads one line on stdin (what to connect with and which lock to take, never on the
command line), takes the lock without waiting, and answers on stdout ``held <session id>``
or ``busy`` (or ``error <kind>``). Holding, it ends when it receives SIGTERM (the write's
commit or abort ended), when the driver process it works for is gone, or when it is killed;
its session ends with it, and the server releases the lock. Ending (unless killed), it
deletes the record a streaming query's driver keeps of its lease.

As a *spare* (its first line asks for one, :mod:`sinks.sql._lease_spares`), it imports the
DB-API driver, listens on a unix socket in the driver's private spare folder, and waits
there for the next write of the same driver to send it that line: the write then pays a
local round trip instead of an interpreter's start and the driver's import (~0.2 s). A
spare ends when its driver is gone, or after ``idle_seconds`` unclaimed.

Every write without a checkpoint starts one, so it starts fast: it is run as a file, not
as ``-m sinks.sql._lease_holder`` (which would import the ``sinks`` and ``twopc`` packages:
pyspark, pyarrow, SQLAlchemy, seconds on a busy machine), and imports the standard library,
the DB-API driver and :mod:`twopc._owner` (standard library only, loaded from its file).
The driver hands it plain values (:func:`sinks.sql.connect._engines.dbapi_connect_params`, the
lock's statements).
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import importlib.util
import json
import os
import pickle
import signal
import socket
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import IO, Any

POLL_SECONDS = 0.2
#: where the answer goes: stdout, or a spare's socket once a write claimed it
_ANSWER: list[IO[str]] = [sys.stdout]
#: the record of the lease, kept by the driver of a streaming query: deleted when the holder ends
_RECORD: list[str] = []


def _stop(_signum: int, _frame: Any) -> None:
    """End now: the kernel closes the session's socket and the server frees the lock."""
    _forget_record()
    os._exit(0)


def _forget_record() -> None:
    """Delete the record a streaming query's driver keeps of this holder's lease, unless it
    names another holder by now."""
    for path in _RECORD:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            with open(path, encoding="utf-8") as f:
                mine = json.load(f)["lease"]["holder_pid"] == os.getpid()
            if mine:
                os.unlink(path)


def _too_slow(_signum: int, _frame: Any) -> None:
    """The connect and the two statements took longer than their bound (a server that
    accepts the connection but never answers): answer and end."""
    print("error", "Timeout", file=_ANSWER[0], flush=True)
    os._exit(2)


def _owner_module() -> ModuleType:
    """:mod:`twopc._owner` (driver liveness), from its file: importing ``twopc`` would load
    pyspark and pyarrow."""
    path = Path(__file__).resolve().parents[2] / "twopc" / "_owner.py"
    spec = importlib.util.spec_from_file_location("_twopc_owner_for_lease_holder", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _wait_as_spare(spare: dict[str, Any], provably_dead: Any) -> tuple[dict[str, Any], IO[str]] | None:
    """Import the driver, listen at ``<folder>/<pid>.sock`` (it appears only once it
    listens) and wait for a write's line; ``(its configuration, where to answer)``, or
    None when the driver is gone or nobody came within ``idle_seconds``."""
    importlib.import_module(spare["module"])
    path = os.path.join(spare["folder"], f"{os.getpid()}.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(1)
    os.rename(path + ".new", path)
    listener.settimeout(POLL_SECONDS)
    idle_until = time.monotonic() + float(spare["idle_seconds"])
    while True:
        try:
            conn, _addr = listener.accept()
            break
        except TimeoutError:
            if provably_dead(spare["driver"]) or time.monotonic() > idle_until:
                _unlink(path)  # a write claiming it this instant gets no answer and starts a holder
                _unlink(os.path.join(spare["folder"], f"{os.getpid()}.claimed"))
                return None
    listener.close()
    _unlink(os.path.join(spare["folder"], f"{os.getpid()}.claimed"))  # the claiming write renamed it
    _unlink(path)
    conn.settimeout(float(spare["bound_seconds"]))
    channel = conn.makefile("rw", encoding="ascii")
    conn.close()  # the file keeps the socket open
    try:
        line = channel.readline()
    except OSError:
        return None
    return (pickle.loads(base64.b64decode(line)), channel) if line else None


def main() -> int:
    signal.signal(signal.SIGTERM, _stop)
    cfg = pickle.loads(base64.b64decode(sys.stdin.readline()))
    provably_dead = _owner_module().provably_dead
    if "spare" in cfg:
        claimed = _wait_as_spare(cfg["spare"], provably_dead)
        if claimed is None:
            return 0
        cfg, _ANSWER[0] = claimed
    out = _ANSWER[0]
    if cfg.get("record"):  # before the answer: a SIGTERM may come as soon as it is read
        _RECORD.append(cfg["record"])
    signal.signal(signal.SIGALRM, _too_slow)
    signal.alarm(max(1, int(cfg["bound_seconds"])))
    try:
        conn = importlib.import_module(cfg["module"]).connect(**cfg["connect"], autocommit=True)
        cur = conn.cursor()
        cur.execute(cfg["try_lock"], (cfg["key"],))
        got = bool(cur.fetchone()[0])
        cur.execute(cfg["session_sql"])
        session = int(cur.fetchone()[0])
    except Exception as exc:  # noqa: BLE001 - any failure is answered by kind only (a driver's message may name the login)
        signal.alarm(0)
        print("error", type(exc).__name__, file=out, flush=True)
        return 2
    signal.alarm(0)
    if not got:
        print("busy", file=out, flush=True)
        return 1
    print("held", session, file=out, flush=True)
    out.close()
    while not provably_dead(cfg["driver"]):
        time.sleep(POLL_SECONDS)
    _forget_record()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
