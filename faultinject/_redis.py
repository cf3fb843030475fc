"""Throwaway redis-server with an fsync-always append-only file."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Sequence

from ._errors import ServerUnavailable
from ._procutil import first_executable, free_port
from ._server import LocalServer

_FIX = "run `make redis` (or `apt-get install -y redis-server`), or point TWOPC_TEST_REDIS_URL at a redis server"


def find_redis_server(explicit: str | None = None) -> str:
    """Path of ``redis-server``: *explicit*, ``$TWOPC_REDIS_SERVER``, ``PATH``, /usr/bin; else
    ServerUnavailable saying how to install it."""
    found = first_executable((explicit, os.environ.get("TWOPC_REDIS_SERVER"), shutil.which("redis-server"),
                              "/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"))
    if found is None:
        raise ServerUnavailable(f"redis-server not found; {_FIX}")
    return found


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class LocalRedis(LocalServer):
    """A private redis-server on ``127.0.0.1:<port>`` (kept across restarts), data in a temporary folder.

    ``appendonly yes``, ``appendfsync always`` (configurable), no RDB snapshots: every acknowledged
    write survives :meth:`kill` + :meth:`restart`. *extra_args* go on the command line.
    :meth:`stop` removes the data; ``atexit`` stops servers still running."""

    _stop_timeout_s = 15.0
    _fix = _FIX

    def __init__(self, *, port: int | None = None, appendfsync: str = "always", binary: str | None = None,
                 base_dir: str | None = None, startup_timeout_s: float = 30.0, extra_args: Sequence[str] = ()) -> None:
        super().__init__(port, base_dir, startup_timeout_s)
        self._extra = tuple(extra_args)
        self.appendfsync = appendfsync
        self._binary = binary

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def data_dir(self) -> str:
        return self._require_tmp()

    @property
    def log_path(self) -> str:
        return os.path.join(self.data_dir, "redis.log")

    def start(self) -> LocalRedis:
        """Start the server (creating the data dir once), wait for PING; ServerUnavailable otherwise."""
        if self.running:
            return self
        binary = self._binary = find_redis_server(self._binary)
        tmp = self._tmp or self._make_tmp("twopc-redis-")
        port = self._port = free_port() if self._port is None else self._port
        self._spawn([binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp,
                     "--appendonly", "yes", "--appendfsync", self.appendfsync, "--save", "",
                     "--daemonize", "no", "--logfile", "", *self._extra], cwd=tmp)
        self._wait_until(lambda: _ping(port), "redis-server", poll_s=0.05)
        return self
