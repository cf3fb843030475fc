"""A Spark Connect server on loopback from the pyspark package, for tests of what runs under Spark Connect (the client
holds no JVM; the data sources run in the server's Python workers). The server leads its own process group, named as
``TWOPC_CRASH_PGID``: a ``crash`` fired in one of its workers kills the whole server, never the client; :meth:`start`
again brings up a fresh one on the same port. It dies with the process that started it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ._procutil import free_port
from ._server import LocalServer
from ._spark_cluster import find_spark_home

if TYPE_CHECKING:
    from typing import Self

_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class LocalSparkConnect(LocalServer):
    """A Spark Connect server (``local[cores,maxFailures]``) on ``127.0.0.1``; *env* is its extra
    environment (and its Python workers'), *conf* extra ``--conf`` settings. :attr:`url` goes to
    ``SparkSession.builder.remote``; :meth:`stop` kills it."""

    _stop_signal = signal.SIGKILL

    def __init__(self, *, cores: int = 2, max_failures: int = 3, env: Mapping[str, str] | None = None,
                 conf: Mapping[str, str] | None = None, base_dir: str | None = None,
                 startup_timeout_s: float = 180.0) -> None:
        super().__init__(None, base_dir, startup_timeout_s)
        self.cores, self.max_failures = cores, max_failures
        self.env = dict(env or {})
        self.conf = dict(conf or {})

    @property
    def url(self) -> str:
        """``sc://127.0.0.1:<port>``."""
        return f"sc://127.0.0.1:{self.port}"

    def _argv(self) -> list[str]:
        conf = {"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(self._port),
                "spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                "spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC", **self.conf}
        argv = [os.path.join(find_spark_home(), "bin", "spark-submit"), "--class", _SERVER_CLASS,
                "--master", f"local[{self.cores},{self.max_failures}]", "--name", "twopc-connect"]
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        return argv

    def start(self) -> Self:
        """Start the server, wait until it accepts connections; ServerUnavailable otherwise."""
        if self.running:
            return self
        tmp = self._tmp or self._make_tmp("twopc-connect-")
        self._port = self._port or free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TWOPC_")}
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.update(self.env)
        # a group of its own, named as the crash target: a crash in its Python workers takes the whole server
        self._spawn(["/bin/sh", "-c", 'export TWOPC_CRASH_PGID=$$; exec "$@"', "sh", *self._argv()],
                    env=env, cwd=tmp)
        self._wait_until(self._answers, "the Spark Connect server", poll_s=0.2)
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
