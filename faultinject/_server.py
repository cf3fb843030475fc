"""What every throwaway server shares: a process in a temporary folder that dies with its
starter, a port kept across restarts, and stop / kill / restart / ``with``."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._errors import ServerUnavailable
from ._lifeline import Lifeline
from ._procutil import kill_tree, log_tail

if TYPE_CHECKING:
    from typing import Self


class Startable:
    """Started by :meth:`start`, stopped (files in ``_tmp`` deleted) by :meth:`stop`; a context manager."""

    _tmp: str | None = None
    _base_dir: str | None = None

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def _require_tmp(self) -> str:
        if self._tmp is None:
            raise ServerUnavailable(f"{type(self).__name__} has not been started (or was stopped)")
        return self._tmp

    def _make_tmp(self, prefix: str) -> str:
        """A new temporary folder in ``_base_dir``, deleted by :meth:`stop` (at the latest at exit)."""
        self._tmp = tempfile.mkdtemp(prefix=prefix, dir=self._base_dir)
        atexit.register(self.stop)
        return self._tmp

    def _remove_tmp(self) -> None:
        """Delete the folder; :meth:`stop` no longer runs at exit."""
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        atexit.unregister(self.stop)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class LocalServer(Startable):
    """Base of the throwaway servers. Subclasses set ``_port`` (or None: :meth:`start` picks one),
    ``_base_dir``, ``_timeout`` and ``_fix`` (the hint a failure ends with), and start the server
    with :meth:`_spawn` (on a :class:`Lifeline`: it dies with its starter, even a SIGKILLed one)."""

    _port: int | None
    _timeout: float
    _fix: str = ""
    _proc: subprocess.Popen[bytes] | None = None
    _lifeline: Lifeline | None = None
    #: the signal that asks the server for a graceful shutdown (one that keeps the data)
    _stop_signal: signal.Signals = signal.SIGTERM
    #: how long the graceful shutdown may take before what is left of the server is killed
    _stop_timeout_s: float = 30.0

    def __init__(self, port: int | None, base_dir: str | None, startup_timeout_s: float) -> None:
        self._port, self._base_dir, self._timeout = port, base_dir, startup_timeout_s

    def _end(self, sig: signal.Signals, timeout_s: float) -> None:
        """Send *sig* to a running server, wait up to *timeout_s*, then SIGKILL what is left of its group, session."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=timeout_s)
        kill_tree(proc.pid)
        proc.wait()
        self._unwatch()

    def _shutdown(self) -> None:
        """Graceful stop keeping the data: ``_stop_signal``, then SIGKILL to the group after ``_stop_timeout_s``."""
        self._end(self._stop_signal, self._stop_timeout_s)
        self._proc = None

    @property
    def port(self) -> int:
        """TCP port (valid after the first :meth:`start`)."""
        if self._port is None:
            raise ServerUnavailable(f"{type(self).__name__} has not been started")
        return self._port

    @property
    def data_dir(self) -> str:
        """The server's data directory (a PostgreSQL cluster's, MariaDB's ``--datadir``)."""
        return os.path.join(self._require_tmp(), "data")

    @property
    def log_path(self) -> str:
        """The server's log: what it wrote (MariaDB's ``--log-error``) and printed."""
        return os.path.join(self._require_tmp(), "server.log")

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self.running else None

    def _spawn(self, argv: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
        """Start *argv* in a session of its own, output appended to :attr:`log_path`, on a lifeline."""
        self._unwatch()
        with open(self.log_path, "ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, **popen)
        self._proc = proc
        self._lifeline = Lifeline(proc.pid)
        return proc

    def _wait_until(self, ready: Callable[[], bool], what: str, poll_s: float = 0.1) -> None:
        """Wait until *ready*; else kill the server and raise :class:`ServerUnavailable` (log tail, ``_fix``)."""
        proc = self._proc
        assert proc is not None
        deadline = time.monotonic() + self._timeout
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                why = (f"exited with {proc.returncode}" if proc.poll() is not None
                       else f"was not ready after {self._timeout:.0f}s")
                tail = log_tail(self.log_path)
                self.kill()
                raise ServerUnavailable(f"{what} on port {self._port} {why}; log tail:\n{tail}\n{self._fix}")
            time.sleep(poll_s)

    @staticmethod
    def _pid_in(pid_file: str) -> int | None:
        try:
            with open(pid_file, encoding="ascii") as fh:
                return int(fh.readline().strip())
        except (OSError, ValueError):
            return None

    def _unwatch(self) -> None:
        if self._lifeline is not None:
            self._lifeline.release()
            self._lifeline = None

    def stop(self) -> None:
        """Shut the server down and delete its files.  Idempotent."""
        self._shutdown()
        self._remove_tmp()

    def kill(self) -> None:
        """Simulate a crash: SIGKILL the server's group and session (with what it forked, e.g. Redis's
        AOF-rewrite child)."""
        self._end(signal.SIGKILL, 0.0)

    def crash(self) -> None:
        """Crash without a clean shutdown (SIGKILL; PostgreSQL: an immediate shutdown), data kept:
        :meth:`restart` runs crash recovery."""
        self.kill()

    def restart(self) -> None:
        """Shut down gracefully if running (data kept) and start again; ServerUnavailable on failure."""
        self._shutdown()
        self.start()
