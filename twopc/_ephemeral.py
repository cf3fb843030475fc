"""The temporary ledgers of writes without ``checkpointLocation`` (drop-in writes), and what
a later write can prove is left over from a dead one.

A drop-in write to a sink that commits a batch in one local transaction keeps its ledger in
``<temp dir>/twopc-ledger-XXXX/`` and deletes it when its commit or abort ends. A write
whose driver is killed half-way leaves the folder behind (and, in the staging mode, its
staged rows). So each folder records its driver (``owner.json``: host, process id and start
time, see :mod:`twopc._owner`), and every later drop-in write on the machine deletes the
folders whose driver is provably gone: on this host, and its process no longer runs. A
folder of a live driver, of another host (a shared temp dir), or without an owner record
(written by an older twopc) is left alone.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from ._owner import DriverIdentity, driver_identity, provably_dead

__all__ = ["PREFIX", "ephemeral_writer_dead", "make_ephemeral_ledger", "sweep_dead_ledgers"]

log = logging.getLogger("twopc.spark")

#: How the temporary ledger folders are named in the temp directory.
PREFIX = "twopc-ledger-"
_OWNER = "owner.json"


def make_ephemeral_ledger() -> str:
    """Create a temporary ledger folder owned by this process's driver; return its path."""
    folder = tempfile.mkdtemp(prefix=PREFIX)
    tmp = os.path.join(folder, f".{_OWNER}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"format": 1, **driver_identity()}, f)
    os.replace(tmp, os.path.join(folder, _OWNER))
    return folder


def _folders(parent: str | None) -> list[Path]:
    try:
        return [p for p in Path(parent or tempfile.gettempdir()).glob(PREFIX + "*") if p.is_dir()]
    except OSError:
        return []


def _owner(folder: Path) -> DriverIdentity | None:
    try:
        data = json.loads((folder / _OWNER).read_text(encoding="utf-8"))
        return DriverIdentity(host=str(data["host"]), pid=int(data["pid"]), started=int(data["started"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _sink_id(folder: Path) -> str | None:
    try:
        return str(json.loads((folder / "twopc" / "sink.json").read_text(encoding="utf-8"))["sink_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _dead(folder: Path) -> bool:
    owner = _owner(folder)
    return owner is not None and provably_dead(owner)


def ephemeral_writer_dead(sink_id: str, parent: str | None = None) -> bool:
    """Whether the drop-in write *sink_id* (an ``eph-`` id) provably died on this machine: its
    temporary ledger is still here and its driver is gone. False when nothing proves it."""
    return any(_sink_id(f) == sink_id and _dead(f) for f in _folders(parent))


def sweep_dead_ledgers(parent: str | None = None) -> list[str]:
    """Delete the temporary ledger folders of drop-in writes whose driver provably died;
    return the deleted paths. Never raises: a folder that cannot be deleted is left."""
    gone = []
    for folder in _folders(parent):
        if _dead(folder):
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                gone.append(str(folder))
    if gone:
        log.warning("twopc: deleted %s temporary ledger folder(s) of drop-in writes whose driver died: %s",
                    len(gone), ", ".join(gone))
    return gone
