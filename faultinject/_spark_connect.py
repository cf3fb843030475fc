"""A Spark Connect server on loopback, from the pyspark package
(``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``), for
tests of what runs under Spark Connect: the client holds no JVM, and the data sources'
Python code runs in Python workers the server starts.

The server is the leader of its own process group and its environment names that group
as the crash target (``TWOPC_CRASH_PGID``): a ``crash`` fault armed in *env* and fired in
one of its Python workers SIGKILLs the whole server (the Connect driver lost between two
protocol steps), never the client. :meth:`kill` does the same from outside;
:meth:`start` again brings up a fresh server on the same port. The server dies with the
process that started it, however that process ends.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ._errors import ServerUnavailable
from ._lifeline import Lifeline
from ._procutil import free_port, kill_tree, log_tail
from ._server import Startable
from ._spark_cluster import find_spark_home

if TYPE_CHECKING:
    from typing import Self

__all__ = ["LocalSparkConnect"]

_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class LocalSparkConnect(Startable):
    """A Spark Connect server (``local[cores,maxFailures]`` master) on ``127.0.0.1``.

    *env*: extra environment of the server and so of its Python workers (``PYTHONPATH``
    where twopc lives, ``TWOPC_FAULTS``, credentials the data sources read). *conf*: extra
    ``--conf`` settings. :attr:`url` is what a client passes to
    ``SparkSession.builder.remote``.
    """

    def __init__(self, *, cores: int = 2, max_failures: int = 3, env: Mapping[str, str] | None = None,
                 conf: Mapping[str, str] | None = None, base_dir: str | None = None,
                 startup_timeout_s: float = 180.0) -> None:
        self.cores, self.max_failures = cores, max_failures
        self.env = dict(env or {})
        self.conf = dict(conf or {})
        self._base_dir = base_dir
        self._timeout = startup_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._lifeline: Lifeline | None = None
        self._port: int | None = None

    @property
    def url(self) -> str:
        """``sc://127.0.0.1:<port>``."""
        if self._port is None:
            raise ServerUnavailable("LocalSparkConnect has not been started")
        return f"sc://127.0.0.1:{self._port}"

    @property
    def log_path(self) -> str:
        """The server's log (its stdout and stderr)."""
        return str(Path(self._require_tmp(), "server.log"))

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _argv(self) -> list[str]:
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self._port),
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.session.timeZone": "UTC",
            **self.conf,
        }
        argv = [os.path.join(find_spark_home(), "bin", "spark-submit"), "--class", _SERVER_CLASS,
                "--master", f"local[{self.cores},{self.max_failures}]", "--name", "twopc-connect"]
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        return argv

    def start(self) -> Self:
        """Start the server and wait until it accepts connections.

        Raises:
            ServerUnavailable: pyspark or java missing, or the server did not come up in time.
        """
        if self.running:
            return self
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="twopc-connect-", dir=self._base_dir)
            atexit.register(self.stop)
        if self._port is None:
            self._port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TWOPC_")}
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.update(self.env)
        # a group of its own, named as the crash target: a crash in its Python workers takes the whole server
        argv = ["/bin/sh", "-c", 'export TWOPC_CRASH_PGID=$$; exec "$@"', "sh", *self._argv()]
        with open(self.log_path, "ab") as out:
            self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                          env=env, start_new_session=True, cwd=self._tmp)
        self._release()
        self._lifeline = Lifeline(self._proc.pid)  # the server and its Python workers die with this process
        deadline = time.monotonic() + self._timeout
        while not self._answers():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                tail = log_tail(self.log_path)
                self.kill()
                raise ServerUnavailable(f"the Spark Connect server did not start; log tail:\n{tail}")
            time.sleep(0.2)
        return self

    def _answers(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self._port or 0), timeout=1):
            return True
        return False

    def wait_dead(self, timeout_s: float = 120.0) -> bool:
        """Wait until the server process ended (a fired ``crash``); True if it did."""
        if self._proc is None:
            return True
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=timeout_s)
        return self._proc.poll() is not None

    def kill(self) -> None:
        """SIGKILL the server and everything in its group; keep its folder and port."""
        if self._proc is not None:
            kill_tree(self._proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=10)
            self._proc = None
        self._release()

    def _release(self) -> None:
        if self._lifeline is not None:
            self._lifeline.release()
            self._lifeline = None

    def stop(self) -> None:
        """Kill the server and delete its folder. Idempotent."""
        self.kill()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        atexit.unregister(self.stop)
