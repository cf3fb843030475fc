"""Hold one thread of a running server at a function, with gdb in non-stop mode (the other
threads keep running): the way to stand a test inside a window of a few instructions.

Needs ``gdb`` and permission to ptrace the server (the tests start it as the same user)."""

from __future__ import annotations

import queue
import shutil
import subprocess
import threading
import time
from types import TracebackType

import pytest

_WAIT_S = 60.0


class ThreadHold:
    """``with ThreadHold(pid, "THD::free_connection") as hold: ...; hold.wait_hit(); ...;
    hold.release()``: the first thread that enters the function stops there until
    :meth:`release` (or the end of the block); the rest of the process runs on."""

    def __init__(self, pid: int, function: str) -> None:
        gdb = shutil.which("gdb")
        if gdb is None:
            pytest.fail("this test needs gdb (apt-get install gdb) to hold a server thread in a window")
        self._function = function
        self._lines: queue.Queue[str] = queue.Queue()
        self._log: list[str] = []
        self._gdb = subprocess.Popen([gdb, "-q", "-nx"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
        threading.Thread(target=self._pump, daemon=True).start()
        self._send("set pagination off", "set confirm off", "set non-stop on", f"attach {pid}")
        self._sync("ATTACHED")
        # in non-stop mode attach stops the threads one by one: resume them only once all are
        # reported, and once more for any reported late
        time.sleep(1.0)
        self._send("continue -a &")
        time.sleep(0.5)
        self._send("continue -a &")
        self._sync("RUNNING")
        self._released = False

    def _pump(self) -> None:
        assert self._gdb.stdout is not None
        for line in self._gdb.stdout:
            self._lines.put(line)

    def _send(self, *commands: str) -> None:
        assert self._gdb.stdin is not None
        for c in commands:
            self._gdb.stdin.write(c + "\n")
        self._gdb.stdin.flush()

    def _expect(self, text: str) -> None:
        deadline = time.monotonic() + _WAIT_S
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=0.2)
            except queue.Empty:
                continue
            self._log.append(line)
            if text in line:
                return
        raise AssertionError(f"gdb never said {text!r}; its output:\n" + "".join(self._log[-60:]))

    def _sync(self, mark: str) -> None:
        self._send(f"echo {mark}\\n")
        self._expect(mark)

    def arm(self) -> None:
        """Stop the next thread that enters the function."""
        self._send(f"tbreak {self._function}")
        self._sync("ARMED")

    def wait_hit(self) -> None:
        """Wait until a thread stopped at the function."""
        self._expect("Temporary breakpoint 1,")

    def release(self) -> None:
        """Let the held thread (and any other) run on, and detach."""
        if self._released:
            return
        self._released = True
        self._send("delete", "continue -a &")
        self._sync("RESUMED")
        self._send("detach", "quit")
        self._gdb.wait(30)

    def __enter__(self) -> ThreadHold:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.release()
        finally:
            if self._gdb.poll() is None:
                self._gdb.kill()
