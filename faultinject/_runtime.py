"""Arming from the environment, slot claiming and firing of fault points."""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any, NoReturn

from ._env import ENV_CONTROL, ENV_CRASH_PGID, ENV_PLAN, ENV_RUN, ENV_SPEC, ENV_STATE, unarmed
from ._errors import FaultSpecError, InjectedFault
from ._proctree import kill_job
from ._run import Run, run_of
from ._spec import REMOTE_ACTIONS, FaultPlan, FaultRule

EXIT_CODE = 17
"""Exit status used by the ``exit`` action."""
RELEASE_FILE = "release"
"""A ``hold`` rule waits until a file of this name is in the state directory."""
HOLD_LIMIT_S = 600.0
"""... or at most this long."""

_EnvKey = tuple[str | None, str | None, str | None, str | None]


class _Armed:
    """A parsed plan bound to its run and state directory, with per-process exhaustion cache."""

    def __init__(self, plan: FaultPlan, state_dir: str | None, run: Run) -> None:
        self.plan = plan
        self.given_state = state_dir  # None: the run's own folder, made on first use
        self.run = run
        self.by_point: dict[str, list[tuple[int, FaultRule]]] = {}
        for index, rule in enumerate(plan.rules):
            self.by_point.setdefault(rule.point, []).append((index, rule))
        self.exhausted: set[int] = set()

    def hit(self, point: str, batch_id: int | None, context: Mapping[str, object]) -> None:
        for index, rule in self.by_point.get(point, ()):
            if index in self.exhausted or not rule.matches(point, batch_id, context):
                continue
            line = f"faultinject: firing {point} ({rule.kind}) batch={batch_id} pid={os.getpid()}"
            if self._claim(index, rule, line):
                _fire(rule, point, batch_id, context, line, self)
                return
            self.exhausted.add(index)

    @property
    def state_dir(self) -> str:
        return self.given_state if self.given_state is not None else self.run.state_dir()

    def _claim(self, index: int, rule: FaultRule, line: str) -> bool:
        """Atomically take one of the rule's ``times`` slots; False if all are used."""
        digest = hashlib.sha256(rule.to_spec().encode()).hexdigest()[:10]
        rule_dir = os.path.join(self.state_dir, f"rule-{index:03d}-{digest}")
        os.makedirs(rule_dir, exist_ok=True)
        for slot in range(1, rule.times + 1):
            try:
                fd = os.open(os.path.join(rule_dir, f"slot-{slot}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                continue
            try:
                os.write(fd, (line + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            return True
        return False


_lock = threading.Lock()
_UNSET: Any = object()
_cache_key: _EnvKey | Any = _UNSET
_armed_now: _Armed | None = None


def _env_key() -> _EnvKey:
    if unarmed():
        return (None, None, None, None)
    env = os.environ
    return (env.get(ENV_SPEC), env.get(ENV_PLAN), env.get(ENV_STATE), env.get(ENV_RUN))


def _arm(key: _EnvKey) -> _Armed | None:
    spec, plan_path, state, _ = key
    state_dir: str | None
    if spec is not None and spec.strip():
        plan = FaultPlan.parse(spec)
        state_dir, plan_path = state or None, None
    elif plan_path:
        spec = None
        try:
            plan = FaultPlan.load(plan_path)
        except OSError as exc:
            raise FaultSpecError(f"cannot read {ENV_PLAN}={plan_path!r}: {exc}") from None
        state_dir = state or plan.state_dir or (os.path.abspath(plan_path) + ".state")
    else:
        return None
    if not plan.rules:
        return None
    return _Armed(plan, state_dir, run_of(os.environ, spec, plan_path, state or None))


def _current() -> _Armed | None:
    global _cache_key, _armed_now
    key = _env_key()
    if key == _cache_key:
        return _armed_now
    with _lock:
        if key != _cache_key:
            armed = _arm(key)  # may raise FaultSpecError: surface it at every hit
            _armed_now, _cache_key = armed, key
        return _armed_now


def hit(name: str, batch_id: int | None, context: Mapping[str, object]) -> None:
    """Fault point *name* reached: the first matching rule that can claim an unused slot in the
    state directory fires its action."""
    if (armed := _current()) is not None:
        armed.hit(name, batch_id, context)


def _announce(line: str, crashing: Run | None = None) -> None:
    """Write *line* to this process's stderr, after what it has buffered. When *crashing* kills the
    run, the line also goes to the stderr of the run's first root (the driver): a Python worker's
    stderr is a pipe the dying JVM may not have copied yet."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    data = (line + "\n").encode()
    with contextlib.suppress(OSError):
        os.write(2, data)
    roots = crashing.local_roots() if crashing is not None else []
    if not roots or roots[0] == os.getpid():
        return
    where = f"/proc/{roots[0]}/fd/2"
    with contextlib.suppress(OSError):
        own, theirs = os.fstat(2), os.stat(where)
        if (own.st_dev, own.st_ino) != (theirs.st_dev, theirs.st_ino):
            # O_APPEND: a log file is never written over; O_NONBLOCK: a full pipe never blocks
            fd = os.open(where, os.O_WRONLY | os.O_APPEND | os.O_NOCTTY | os.O_NONBLOCK)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)


def _crash_pgid() -> int | None:
    raw = os.environ.get(ENV_CRASH_PGID, "").strip()
    try:
        pgid = int(raw)
    except ValueError:
        return None
    return pgid if pgid > 1 else None


def _fire(rule: FaultRule, point: str, batch_id: int | None, context: Mapping[str, object], line: str,
          armed: _Armed) -> None:
    _announce(line, armed.run if rule.action == "crash" else None)
    if rule.action in REMOTE_ACTIONS:
        from ._control import request_remote_fault
        request_remote_fault(rule, line)
        return
    if rule.action == "hold":
        release = os.path.join(armed.state_dir, RELEASE_FILE)
        _announce(f"faultinject: holding until {release} exists")
        _hold(release)
        return
    if rule.action == "raise":
        raise InjectedFault(point, {"batch_id": batch_id, **context})
    if rule.action == "crash":
        _crash(armed.run)
    if os.getpid() in armed.run.local_roots():  # the run's root dies alone: its run is over
        armed.run.end()
    if rule.action == "exit":
        os._exit(EXIT_CODE)
    os.kill(os.getpid(), signal.SIGKILL)


def _hold(release: str) -> None:
    """Wait until *release* exists (polled every 50 ms), at most :data:`HOLD_LIMIT_S`."""
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.05)


def _crash(run: Run) -> NoReturn:
    """SIGKILL the job (the ``TWOPC_CRASH_PGID`` group and this process's own, else the run's roots,
    their descendants and the groups those lead), then this process, after deleting the run's folder."""
    target = _crash_pgid()
    own = os.getpgrp()
    if target is not None and target != own:
        with contextlib.suppress(OSError):
            os.killpg(target, signal.SIGKILL)
    job = kill_job(run.local_roots()) if target is None else set()
    run.end()
    if own > 1 and (target is not None or own == os.getpid() or own in job):
        with contextlib.suppress(OSError):
            os.killpg(own, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
    raise SystemExit(EXIT_CODE)  # unreachable; keeps type checkers honest


def export_crash_group() -> int:
    """Record this process's group as the job's crash group (``TWOPC_CRASH_PGID``, inherited) and
    return its id: a ``crash`` fired anywhere then kills this whole group. For a job that leads its
    own group (``ChaosRunner``, ``setsid``); otherwise the crash also kills e.g. ``make``."""
    pgid = os.getpgrp()
    os.environ[ENV_CRASH_PGID] = str(pgid)
    return pgid


_EXPORTED = (ENV_SPEC, ENV_PLAN, ENV_STATE, ENV_CONTROL)


def export_run(environment: MutableMapping[str, str] | None = None, *, pids: Iterable[int] = ()) -> dict[str, str]:
    """Hand the run of the plan armed in this process to the processes started from now on.

    Makes this process a run's root unless it belongs to one, counts *pids* (Spark's JVM) among the
    roots, makes the run's own state folder, and sets ``TWOPC_FAULT_RUN`` in ``os.environ`` and,
    with the plan's variables, in *environment* (``SparkContext.environment``: later Python workers
    get it even when the JVM started before). A ``crash`` in any process of the run then kills all
    of it. ``twopc.register`` calls it. Returns the variables set (``{}`` when no plan is armed);
    raises FaultSpecError for a malformed spec or unreadable plan."""
    armed = _current()
    if armed is None:
        return {}
    run = armed.run
    for pid in pids:
        run.add_root(pid)
    if run.scoped:
        run.state_dir()
    values = {name: value for name in _EXPORTED if (value := os.environ.get(name))}
    values[ENV_RUN] = os.environ[ENV_RUN] = run.to_env()
    if environment is not None:
        environment.update(values)
    return values


def current_state_dir() -> str | None:
    """The state directory of the plan armed here (the run's own folder, made now if need be, for an
    inline spec without ``TWOPC_FAULT_STATE``), or None; FaultSpecError for a malformed plan."""
    armed = _current()
    return None if armed is None else armed.state_dir


@contextlib.contextmanager
def armed(plan: FaultPlan | str, state_dir: str | os.PathLike[str] | None = None, *,
          spark_context: Any = None) -> Iterator[FaultPlan]:
    """Arm *plan* in this process for the block; yields the plan with ``state_dir`` filled in.

    Sets ``TWOPC_FAULTS``/``TWOPC_FAULT_STATE`` (removing ``TWOPC_FAULT_PLAN``) and restores them
    and ``TWOPC_FAULT_RUN`` on exit. The state directory is *state_dir*, else the plan's, else a
    temporary one deleted on exit. With *spark_context* its ``environment`` gets the same
    variables, so Python functions shipped afterwards (UDFs, ``foreachPartition``) see the plan.
    Never use a ``crash`` rule in-process: it kills this process. FaultSpecError for a malformed plan."""
    parsed = FaultPlan.coerce(plan)
    given = os.fspath(state_dir) if state_dir is not None else parsed.state_dir
    targets: list[MutableMapping[str, str]] = [os.environ]
    if spark_context is not None:
        targets.append(spark_context.environment)
    saved = [{k: t.get(k) for k in (ENV_SPEC, ENV_PLAN, ENV_STATE, ENV_RUN)} for t in targets]
    with (contextlib.nullcontext(given) if given is not None
          else tempfile.TemporaryDirectory(prefix="twopc-faults-", ignore_cleanup_errors=True)) as chosen:
        try:
            for target in targets:
                target.pop(ENV_PLAN, None)
                target.update(parsed.env(chosen))
            yield dataclasses.replace(parsed, state_dir=chosen)
        finally:
            for target, old in zip(targets, saved, strict=True):
                for key, value in old.items():
                    if value is None:
                        target.pop(key, None)
                    else:
                        target[key] = value


def read_firings(state_dir: str | os.PathLike[str]) -> list[str]:
    """The ``faultinject: firing ...`` lines recorded in *state_dir*, oldest first (``[]`` if absent)."""
    found: list[tuple[float, str]] = []
    for slot in glob.glob(os.path.join(glob.escape(os.fspath(state_dir)), "*", "*")):  # rule folder / slot file
        with contextlib.suppress(OSError), open(slot, encoding="utf-8", errors="replace") as fh:
            found.append((os.stat(slot).st_mtime, fh.read().strip()))
    return [text for _, text in sorted(found)]
