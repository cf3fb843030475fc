"""Run a job command under a fault plan, restarting it after each crash until it succeeds.

Each run starts in a new session with the plan armed and ``TWOPC_CRASH_PGID`` set to the job's
group, so a ``crash`` in any descendant (a Spark Python worker included) takes the whole job
down; the job dies with the runner too. Rule ``times`` live in one state directory shared by
all runs, so a restarted job does not crash again where they are used up."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO

from ._env import ENV_CRASH_PGID, ENV_PLAN, ENV_RUN, ENV_SPEC, ENV_STATE
from ._lifeline import Lifeline
from ._procutil import kill_tree
from ._runtime import read_firings
from ._spec import FaultPlan

PROGRESS_PREFIXES = ("faultinject:", "progress:")
"""Child stderr lines with these prefixes are passed to ``on_progress``."""

_WRAPPER = 'TWOPC_CRASH_PGID=$$; export TWOPC_CRASH_PGID; exec "$@"'


@dataclasses.dataclass(frozen=True)
class ChaosRun:
    """Outcome of one run: ``returncode`` (raw ``Popen`` code, negative = that signal), ``signal``
    (the number it died by, if any), ``stderr_tail`` (the last lines)."""

    returncode: int
    signal: int | None
    duration_s: float
    stderr_tail: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """True if the run exited 0 within the time budget."""
        return self.returncode == 0 and not self.timed_out

    def describe(self) -> str:
        """Short human-readable outcome, e.g. ``'killed by SIGKILL after 1.2s'``."""
        if self.timed_out:
            how = "timed out (killed)"
        elif self.signal is not None:
            how = f"killed by {signal.Signals(self.signal).name}"
        else:
            how = f"exit {self.returncode}"
        return f"{how} after {self.duration_s:.1f}s"


@dataclasses.dataclass(frozen=True)
class ChaosReport:
    """All runs of one :meth:`ChaosRunner.run_until_done`; ``fired`` holds the firing lines of the
    state directory (complete even when a crash swallowed the stderr line)."""

    runs: tuple[ChaosRun, ...]
    fired: tuple[str, ...]
    state_dir: str

    @property
    def completed(self) -> bool:
        """True if the last run exited 0."""
        return bool(self.runs) and self.runs[-1].ok

    @property
    def crashes(self) -> int:
        """Runs that ended by a signal or a nonzero exit (timeouts excluded)."""
        return sum(1 for r in self.runs if not r.ok and not r.timed_out)

    @property
    def timed_out(self) -> bool:
        """True if the time budget ran out (the last run was killed)."""
        return any(r.timed_out for r in self.runs)

    def summary(self) -> str:
        lines = [f"{len(self.runs)} run(s), {self.crashes} crash(es), completed={self.completed}"]
        lines += [f"  run {i + 1}: {r.describe()}" for i, r in enumerate(self.runs)]
        return "\n".join(lines)

    def raise_for_status(self) -> ChaosReport:
        """Return self if completed, else raise :class:`ChaosJobFailed`."""
        if not self.completed:
            raise ChaosJobFailed(self)
        return self


class ChaosJobFailed(RuntimeError):
    """The job never exited 0 within ``max_restarts`` restarts / the time budget."""

    def __init__(self, report: ChaosReport) -> None:
        self.report = report
        tail = report.runs[-1].stderr_tail if report.runs else ""
        super().__init__(f"chaos job did not complete: {report.summary()}\nstderr tail:\n{tail}")


class ChaosRunner:
    """Runs a job command repeatedly under a fault plan.

    *env* is the job's base environment (default ``os.environ``; inherited ``TWOPC_FAULT*`` and
    ``TWOPC_CRASH_PGID`` replaced), *cwd* its folder, *state_dir* where rule slots are counted
    (default: the plan's, else a temporary folder removed afterwards), *stdout* where its stdout
    goes (None: inherit); *echo_stderr* copies its stderr here, *tail_lines* are kept per run."""

    def __init__(self, *, env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
                 state_dir: str | os.PathLike[str] | None = None, stdout: int | IO[bytes] | None = None,
                 echo_stderr: bool = False, tail_lines: int = 40) -> None:
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self.state_dir = os.fspath(state_dir) if state_dir is not None else None
        self.stdout = stdout
        self.echo_stderr = echo_stderr
        self.tail_lines = tail_lines

    def run_until_done(self, cmd: Sequence[str], plan: FaultPlan | str, *, max_restarts: int = 10,
                       timeout_s: float = 600.0, on_progress: Callable[[str], None] | None = None,
                       on_run_end: Callable[[ChaosRun, list[str]], None] | None = None) -> ChaosReport:
        """Run *cmd* until it exits 0, restarting it after every abnormal end; after each run the
        job's leftover processes are SIGKILLed and *on_run_end* gets the run and its new firing lines.

        *timeout_s* budgets all runs together (then the job is SIGKILLed, the report ``timed_out``).
        *on_progress* gets (from a reader thread) each stderr line starting ``faultinject:`` or
        ``progress:``. Job failures never raise (see ``report.raise_for_status()``); FaultSpecError
        for a malformed plan, OSError when *cmd* cannot start."""
        parsed = FaultPlan.coerce(plan)
        given = self.state_dir or parsed.state_dir
        env = {k: v for k, v in self.env.items() if k not in (ENV_SPEC, ENV_PLAN, ENV_STATE, ENV_RUN, ENV_CRASH_PGID)}
        deadline = time.monotonic() + timeout_s
        runs: list[ChaosRun] = []
        with (contextlib.nullcontext(given) if given is not None
              else tempfile.TemporaryDirectory(prefix="twopc-chaos-", ignore_cleanup_errors=True)) as state_dir:
            os.makedirs(state_dir, exist_ok=True)
            env.update(parsed.env(state_dir))
            while True:
                before = len(read_firings(state_dir))
                run = self._run_once(list(cmd), env, deadline, on_progress)
                runs.append(run)
                if on_run_end is not None:
                    on_run_end(run, read_firings(state_dir)[before:])
                if run.ok or run.timed_out or len(runs) > max_restarts:
                    break
            fired = tuple(read_firings(state_dir))
        return ChaosReport(tuple(runs), fired, state_dir)

    def _run_once(self, cmd: list[str], env: dict[str, str], deadline: float,
                  on_progress: Callable[[str], None] | None) -> ChaosRun:
        started = time.monotonic()
        proc = subprocess.Popen(["/bin/sh", "-c", _WRAPPER, "faultinject-job", *cmd], env=env, cwd=self.cwd,
                                stdin=subprocess.DEVNULL, stdout=self.stdout, stderr=subprocess.PIPE,
                                start_new_session=True)
        lifeline = Lifeline(proc.pid)  # a runner that dies takes its job along
        tail: collections.deque[str] = collections.deque(maxlen=self.tail_lines)
        reader = threading.Thread(target=self._pump, args=(proc, tail, on_progress), name="chaos-stderr", daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            kill_tree(proc.pid)
            proc.wait()
            lifeline.release()
        reader.join(timeout=5.0)
        rc = proc.returncode
        return ChaosRun(returncode=rc, signal=-rc if rc < 0 else None, duration_s=time.monotonic() - started,
                        stderr_tail="\n".join(tail), timed_out=timed_out)

    def _pump(self, proc: subprocess.Popen[bytes], tail: collections.deque[str],
              on_progress: Callable[[str], None] | None) -> None:
        assert proc.stderr is not None
        with proc.stderr:
            for raw in proc.stderr:
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                tail.append(line)
                if self.echo_stderr:
                    sys.stderr.write(line + "\n")
                if on_progress is not None and line.startswith(PROGRESS_PREFIXES):
                    try:
                        on_progress(line)
                    except Exception as exc:  # noqa: BLE001 - a broken callback must not hang the pump
                        sys.stderr.write(f"twopc.faultinject.chaos: on_progress failed: {exc!r}\n")
