"""The temporary ledgers of writes without ``checkpointLocation`` (drop-in writes), in ``<temp
dir>/twopc-ledger-XXXX/``, deleted when the write ends. Each records its driver (``owner.json``); later drop-in
writes on the machine reduce the folders of provably dead drivers to that record, deleted a week after the write
started (until then a write to the dead write's table can prove it dead and delete its staged rows). Folders of live
drivers, other hosts or users, or without an owner record are left alone."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

from .._driver_identity import DriverIdentity, driver_identity, provably_dead

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
    """This user's temporary ledger folders (another user's are theirs to clean, even for root)."""
    out = []
    with contextlib.suppress(OSError):
        for p in Path(parent or tempfile.gettempdir()).glob(PREFIX + "*"):
            st = p.lstat()
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
                out.append(p)
    return out


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


def ephemeral_writer_dead(sink_id: str, parent: str | None = None) -> bool:
    """Whether drop-in write *sink_id* provably died here: its ledger remains and its driver is gone."""
    return any(_sink_id(f) == sink_id and (owner := _owner(f)) is not None and provably_dead(owner)
               for f in _folders(parent))


#: How long a dead drop-in write's owner record is kept (far above stagingRetention's 24 h).
TOMBSTONE_SECONDS = 7 * 24 * 3600


def _tombstone(folder: Path) -> bool:
    """Delete all of a dead write's folder but ``owner.json`` and ``twopc/sink.json``; return whether
    there was anything else."""
    keep = {folder / _OWNER, folder / "twopc", folder / "twopc" / "sink.json"}
    extra = [p for p in [*folder.iterdir(), *(folder / "twopc").glob("*")] if p not in keep]
    for p in extra:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return bool(extra)


def sweep_dead_ledgers(parent: str | None = None, *, now: float | None = None) -> list[str]:
    """Reduce the folders of provably dead drop-in writes to their owner record (so a later write to
    that table still proves the driver dead), deleting it :data:`TOMBSTONE_SECONDS` after the write
    started; return the paths changed, each logged at INFO. Never raises."""
    now = time.time() if now is None else now
    changed = []
    for folder in _folders(parent):
        if (owner := _owner(folder)) is None or not provably_dead(owner):
            continue
        sink_id = _sink_id(folder)
        try:
            if now - (folder / _OWNER).stat().st_mtime > TOMBSTONE_SECONDS or sink_id is None:
                shutil.rmtree(folder, ignore_errors=True)
                log.info("twopc: removed %s, the temporary ledger of drop-in write %s, whose driver (process %s "
                         "on this host) is gone", folder, sink_id or "(unnamed)", owner["pid"])
            elif _tombstone(folder):
                log.info("twopc: emptied %s, the temporary ledger of drop-in write %s, whose driver (process %s "
                         "on this host) is gone; its owner record stays until %s days after the write started",
                         folder, sink_id, owner["pid"], TOMBSTONE_SECONDS // 86400)
            else:
                continue  # already only its owner record
        except OSError:
            continue
        changed.append(str(folder))
    return changed
