"""The run of a job a fault plan is armed in: the processes a ``crash`` kills, and the folder
where an inline spec without ``TWOPC_FAULT_STATE`` counts its ``times``.

A run's root is the first process that arms a plan and finds no run of it in its environment.
``TWOPC_FAULT_RUN`` (JSON) hands it on: the plan's digest, the boot, the roots (pid and start
time) and the state folder. A folder left by a run killed from outside is deleted by the user's
next run of any plan once all its roots are gone; a plan's own state folder never is."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from ._env import ENV_RUN
from ._proctree import boot_id, start_time

RUN_PREFIX = "twopc-faults-run-"
"""Name prefix of a run's own state folder in the temporary directory."""
_RECORD = "run.json"

_lock = threading.Lock()
_own: dict[str, Run] = {}  # plan key -> the run this process is the root of


def plan_key(spec: str | None, plan_path: str | None, state: str | None) -> str:
    """A digest of the variables that arm a plan: a run belongs to one plan."""
    text = json.dumps([spec, plan_path, state])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Run:
    """One run of one plan: its roots, its boot and (for a run-scoped state) its folder."""

    def __init__(self, key: str, roots: Iterable[tuple[int, int]], boot: str, state: str | None,
                 *, scoped: bool, owned: bool) -> None:
        self.key = key
        self.roots = list(dict.fromkeys(roots))
        self.boot = boot
        self.state = state
        self.scoped = scoped  # the state folder is the run's own (deleted when the run ends)
        self.owned = owned  # this process made the run: it deletes the folder when it exits

    @classmethod
    def parse(cls, raw: str | None, key: str) -> Run | None:
        """The run recorded in *raw* (a ``TWOPC_FAULT_RUN`` value) if it belongs to plan *key*."""
        if not raw:
            return None
        try:
            data = json.loads(raw)
            if data.get("key") != key:
                return None
            roots = [(int(pid), int(start)) for pid, start in data["roots"]]
            state = data.get("state")
            return cls(key, roots, str(data["boot"]), state if isinstance(state, str) else None,
                       scoped=isinstance(state, str), owned=False)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def to_env(self) -> str:
        return json.dumps({"key": self.key, "boot": self.boot, "roots": self.roots,
                           "state": self.state if self.scoped else None})

    def add_root(self, pid: int) -> None:
        """Count *pid* (alive, on this machine) among the run's processes."""
        start = start_time(pid)
        if start is not None and (pid, start) not in self.roots:
            self.roots.append((pid, start))
            self._write_record()

    def local_roots(self) -> list[int]:
        """The roots still alive as the very processes recorded (none from another boot)."""
        if self.boot != boot_id():
            return []
        return [pid for pid, start in self.roots if start_time(pid) == start]

    def state_dir(self) -> str:
        """The run's own state folder, made on first use."""
        with _lock:
            if self.state is None:
                sweep_ended_runs()
                self.state = tempfile.mkdtemp(prefix=RUN_PREFIX)
                self._write_record()
            return self.state

    def _write_record(self) -> None:
        if self.scoped and self.state is not None:
            with contextlib.suppress(OSError), open(os.path.join(self.state, _RECORD), "w", encoding="utf-8") as fh:
                fh.write(self.to_env())

    def end(self) -> None:
        """The run is over: delete its own state folder (never a given one)."""
        if self.scoped and self.state is not None:
            shutil.rmtree(self.state, ignore_errors=True)


def run_of(env: Mapping[str, str], spec: str | None, plan_path: str | None, state: str | None) -> Run:
    """The run of the plan (*spec*/*plan_path*/*state*) this process belongs to: the one in *env* if
    it is of this plan, else a new one rooted here."""
    key = plan_key(spec, plan_path, state)
    found = Run.parse(env.get(ENV_RUN), key)
    with _lock:
        own = _own.get(key)
        if found is not None:
            if own is not None and own.state == found.state:  # this process's own run, handed on
                own.roots = found.roots
                return own
            return found
        if own is None:
            me = os.getpid()
            roots = [(me, start)] if (start := start_time(me)) is not None else []
            own = _own[key] = Run(key, roots, boot_id(), None, scoped=state is None and spec is not None, owned=True)
        return own


def _alive(record: Mapping[str, Any], boot: str) -> bool:
    if record.get("boot") != boot:
        return False
    return any(start_time(int(pid)) == int(start) for pid, start in record.get("roots", ()))


def sweep_ended_runs() -> None:
    """Delete the state folders of this user's ended runs (never a folder without a run record)."""
    root, uid, boot = tempfile.gettempdir(), os.getuid(), boot_id()
    try:
        names = [n for n in os.listdir(root) if n.startswith(RUN_PREFIX)]
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        try:
            info = os.lstat(path)
            if info.st_uid != uid or not stat.S_ISDIR(info.st_mode):
                continue
            with open(os.path.join(path, _RECORD), encoding="utf-8") as fh:
                record = json.load(fh)
            if not _alive(record, boot):
                shutil.rmtree(path, ignore_errors=True)
        except (OSError, ValueError, TypeError, AttributeError):
            continue


@atexit.register
def _end_own_runs() -> None:
    """A root that exits normally ends its runs (Spark's workers are gone by then)."""
    for run in list(_own.values()):
        if run.owned:
            run.end()
