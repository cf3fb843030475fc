"""Finding, starting and asking the driver agent (:mod:`twopc.ledger._agent`). This user's agents
live in ``<temp dir>/twopc-agent-<uid>/`` (``0700``): a driver's is found through ``<key>.pid``
(*key* hashes the driver's identity) and asked at ``<pid>.sock``. The first request starts a
missing agent and waits until it listens; of two started at once, one exits."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from .. import _driver_identity
from .._driver_identity import DriverIdentity, _start_ticks, driver_identity
from .._errors import ConfigurationError
from .._host_dirs import private_dir

__all__ = ["AGENTS", "DriverAgent", "Pending", "agent_folder", "ask_agent"]

#: The name (before ``-<uid>``) of this user's folder of driver agents in the temp dir.
AGENTS = "twopc-agent"
#: How long a request waits for a starting agent to listen (a bound: it starts in well under a second).
START_SECONDS = 60.0
_MAX_SOCKET_PATH = 100  # AF_UNIX paths hold 108 bytes
#: How long a request waits for an agent that ended unanswering to be gone (a bound: milliseconds).
_GONE_SECONDS = 5.0
#: The agents this process started, by driver key: later requests wait for that one.
_STARTED: dict[str, subprocess.Popen[bytes]] = {}
#: the agent's program, run as a script (not imported: a worker that asks the agent loads none of it)
_AGENT_SCRIPT = Path(__file__).with_name("_agent.py")


def agent_folder() -> Path:
    """``<temp dir>/twopc-agent-<uid>/``, made when missing.
    Raises ConfigurationError: it is not this user's alone, or too long for a unix socket."""
    folder = private_dir(AGENTS)
    where = Path(tempfile.gettempdir(), f"{AGENTS}-{os.getuid()}")
    if folder is None:
        raise ConfigurationError(f"{where} is not a folder of this user's alone (mode 0700, owned by uid "
                                 f"{os.getuid()}), so twopc's driver agent cannot keep its socket there: remove it "
                                 f"and start again")
    if len(str(folder / "4194304.sock.new")) > _MAX_SOCKET_PATH:
        raise ConfigurationError(f"{where} is too long a path for a unix socket ({_MAX_SOCKET_PATH} bytes at most): "
                                 f"set TMPDIR to a shorter folder")
    return folder


def _key(driver: DriverIdentity) -> str:
    return hashlib.sha256(json.dumps(dict(driver), sort_keys=True).encode()).hexdigest()[:16]


def _encode(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"), default=_bytes_as_json)


def _bytes_as_json(value: object) -> dict[str, str]:
    """Bytes as ``{"bytes": <base64>}`` (SQLAlchemy hands PyMySQL its password as bytes)."""
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"the driver agent's requests carry plain values, not {type(value).__name__}")


def ask_agent(pid: int, message: dict[str, Any], timeout: float) -> list[str]:
    """Send *message* (credentials included, never logged) to agent *pid*; its answer's words, ``[]`` when none."""
    return Pending.send(pid, message, timeout).answer()


class Pending:
    """A request sent to an agent, its answer not read yet."""

    def __init__(self, pid: int, channel: TextIO | None) -> None:
        self.pid = pid
        self.channel = channel
        #: the agent ended rather than answer (a running agent answers every request)
        self.ended = channel is None

    @classmethod
    def send(cls, pid: int, message: dict[str, Any], timeout: float) -> Pending:
        """Send *message* to agent *pid*; the channel is None when it did not take it."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(timeout)
        try:
            conn.connect(str(agent_folder() / f"{pid}.sock"))
            channel = conn.makefile("rw", encoding="ascii")
            channel.write(_encode(message) + "\n")
            channel.flush()
        except OSError:
            conn.close()
            return cls(pid, None)
        conn.close()  # the channel keeps the socket open
        return cls(pid, channel)

    def answer(self) -> list[str]:
        """The answer's words; ``[]`` when the agent did not answer."""
        if self.channel is None:
            return []
        try:
            with self.channel:
                line = self.channel.readline()
        except TimeoutError:
            return []  # no answer in time: the agent may still be at work
        except OSError:  # the connection was reset: the agent ended with the request unread
            self.ended = True
            return []
        self.ended = not line
        return line.split()


class DriverAgent:
    """The agent of *driver* (default: this process's driver)."""

    def __init__(self, driver: DriverIdentity | None = None) -> None:
        self.driver = driver if driver is not None else driver_identity()
        self.folder = agent_folder()
        self.key = _key(self.driver)
        self._proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        """The agent's command line (``-P``; no credentials: they come in requests)."""
        return [sys.executable, "-P", str(_AGENT_SCRIPT), str(self.folder), self.key,
                json.dumps(dict(self.driver), sort_keys=True), _driver_identity.__file__]

    def running(self) -> int | None:
        """The agent's process id once it listens, else None."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid, started = (int(w) for w in (self.folder / f"{self.key}.pid").read_text(encoding="ascii").split())
            if _start_ticks(pid) == started:
                return pid
        return None

    def start(self) -> None:
        """Start the agent unless it runs (or this process started it); not waited for."""
        if self._proc is None and (earlier := _STARTED.get(self.key)) is not None and earlier.poll() is None:
            self._proc = earlier  # started by this process, maybe still starting: wait for that one
        if self._proc is None and self.running() is None:
            with open(self.folder / f"{self.key}.log", "ab") as log:
                self._proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                              start_new_session=True, close_fds=True)
            _STARTED[self.key] = self._proc

    def _wait(self) -> int | None:
        """The agent's process id, started and awaited; None when it did not start."""
        deadline = time.monotonic() + START_SECONDS
        while (pid := self.running()) is None:
            self.start()
            if self._proc is not None and self._proc.poll() is not None:
                from . import _agent  # its exit code's meaning: this process runs it as a script, never imports it
                if self._proc.returncode >= 0 and self._proc.returncode != _agent.ALREADY_RUNNING:
                    return None  # it failed to start (its log says why): starting it again fails too
                # another process of the driver started it, or it was killed
                self._proc = None
            if time.monotonic() > deadline:
                return None
            time.sleep(0.005)
        return pid

    def send(self, message: dict[str, Any], timeout: float) -> Pending:
        """Send *message* to the agent (started if needed); no answer gives ``[]`` or
        ``["error", "AgentDidNotStart"]``."""
        for attempt in range(2):  # an agent that ended just before it was asked: ask a new one
            if (pid := self._wait()) is None:
                break
            pending = Pending.send(pid, message, timeout)
            if pending.channel is not None or attempt or self.running() == pid:
                return pending
        return _NotStarted(0, None)

    def request(self, message: dict[str, Any], timeout: float) -> tuple[int, list[str]]:
        """:meth:`send` and return the agent's pid and answer. An agent killed while asked held nothing
        needed: a new one is asked once, after the old one is gone."""
        for attempt in range(2):
            pending = self.send(message, timeout)
            words = pending.answer()
            if words or attempt or not pending.pid or not pending.ended:
                break
            deadline = time.monotonic() + _GONE_SECONDS
            while self.running() == pending.pid and time.monotonic() < deadline:
                time.sleep(0.01)
        return pending.pid, words


class _NotStarted(Pending):
    def answer(self) -> list[str]:
        return ["error", "AgentDidNotStart"]
