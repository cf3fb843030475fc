"""A Spark standalone cluster on loopback from the pyspark package: a master and *workers* workers, so executors run in
JVMs of their own. Each executor JVM leads its own process group (``TWOPC_CRASH_PGID``): a ``crash`` in one of its
Python workers kills that executor only (a task Spark runs again elsewhere), never the worker daemon or the driver."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ._errors import ServerUnavailable
from ._lifeline import Lifeline
from ._procutil import first_executable, free_port, kill_tree, log_tail
from ._server import Startable

if TYPE_CHECKING:
    from typing import Self

_EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"

# The executors' java: a group (and session) of their own, and that group as crash target.
_JAVA_WRAPPER = """#!/bin/sh
case "$*" in
  *{cls}*) exec setsid env TWOPC_CRASH_PGID=$$ "{java}" "$@" ;;
esac
exec "{java}" "$@"
"""


def find_spark_home() -> str:
    """The Spark distribution inside pyspark; ServerUnavailable without pyspark or ``bin/spark-class``."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ServerUnavailable("pyspark is not installed: pip install pyspark")
    home = os.path.dirname(spec.origin)
    if not os.access(os.path.join(home, "bin", "spark-class"), os.X_OK):
        raise ServerUnavailable(f"{home} has no bin/spark-class: reinstall pyspark")
    return home


def _real_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    found = first_executable([os.path.join(java_home, "bin", "java") if java_home else None,
                              *(os.path.join(p, "java") for p in os.environ.get("PATH", "").split(os.pathsep))])
    if found is None:
        raise ServerUnavailable("no java found: install a JDK 17+ or set JAVA_HOME")
    return os.path.realpath(found)


class LocalSparkCluster(Startable):
    """A standalone master and *workers* workers on ``127.0.0.1`` (*cores*, *memory* each; a job's
    ``spark.executor.memory`` must fit), folders in a temporary directory. :attr:`master_url` goes to
    ``SparkSession.builder.master``."""

    def __init__(self, *, workers: int = 2, cores: int = 1, memory: str = "1g", daemon_memory: str = "256m",
                 base_dir: str | None = None, startup_timeout_s: float = 120.0) -> None:
        self.workers, self.cores, self.memory = workers, cores, memory
        self._daemon_memory = daemon_memory
        self._base_dir = base_dir
        self._timeout = startup_timeout_s
        self._procs: list[subprocess.Popen[bytes]] = []
        self._lifelines: list[Lifeline] = []
        self._port: int | None = None
        self._worker_ports: list[int] = []

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``."""
        if self._port is None:
            raise ServerUnavailable("LocalSparkCluster has not been started")
        return f"spark://127.0.0.1:{self._port}"

    def _env(self, java_home: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TWOPC_")}
        env.update(SPARK_HOME=find_spark_home(), SPARK_LOCAL_IP="127.0.0.1", JAVA_HOME=java_home,
                   SPARK_DAEMON_MEMORY=self._daemon_memory,
                   SPARK_DAEMON_JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
                   SPARK_LOG_DIR=str(Path(self._require_tmp(), "logs")))
        return env

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Path:
        log = Path(self._require_tmp(), f"{name}.log")
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True, cwd=self._tmp)
        self._procs.append(proc)
        self._lifelines.append(Lifeline(proc.pid))  # the daemon and its executors die with this process
        return log

    def _wait_for(self, log: Path, text: str, what: str) -> None:
        deadline = time.monotonic() + self._timeout
        while True:
            with contextlib.suppress(OSError):
                if text in log.read_text(errors="replace"):
                    return
            dead = [p for p in self._procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                tail = log_tail(str(log))
                self.stop()
                raise ServerUnavailable(f"the Spark {what} did not start; log tail:\n{tail}")
            time.sleep(0.1)

    def start(self) -> Self:
        """Start the master and workers, wait until every worker registered; ServerUnavailable otherwise."""
        if self._procs:
            return self
        home = find_spark_home()
        tmp = self._make_tmp("twopc-spark-")
        java_home = Path(tmp, "java")
        (java_home / "bin").mkdir(parents=True)
        wrapper = java_home / "bin" / "java"
        wrapper.write_text(_JAVA_WRAPPER.format(cls=_EXECUTOR_CLASS, java=_real_java()))
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        env = self._env(str(java_home))
        spark_class = os.path.join(home, "bin", "spark-class")
        self._port = free_port()
        log = self._spawn("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                     "--port", str(self._port), "--webui-port", str(free_port())], env)
        self._wait_for(log, "I have been elected leader", "master")
        for i in range(self.workers):
            port = free_port()
            self._worker_ports.append(port)
            work = Path(tmp, f"work{i}")
            work.mkdir()
            log = self._spawn(f"worker{i}", [
                spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", str(port),
                "--webui-port", str(free_port()), "--cores", str(self.cores), "--memory", self.memory,
                "--work-dir", str(work), self.master_url], env)
            self._wait_for(log, "Successfully registered with master", f"worker {i}")
        return self

    def executor_pids(self) -> list[int]:
        """The live executor JVMs of this cluster's workers (a scan of ``/proc``)."""
        marks = [f"Worker@127.0.0.1:{p}".encode() for p in self._worker_ports]
        out = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                cmd = Path("/proc", name, "cmdline").read_bytes()
            except OSError:
                continue
            if _EXECUTOR_CLASS.encode() in cmd and any(m in cmd for m in marks):
                out.append(int(name))
        return sorted(out)

    def executors_launched(self) -> int:
        """How many executors the workers launched so far (their folders ``app-*/<n>``)."""
        return sum(1 for p in Path(self._require_tmp()).glob("work*/app-*/*") if p.is_dir())

    def wait_no_executors(self, timeout_s: float = 60.0) -> list[int]:
        """Wait until no executor of this cluster runs; returns the pids still running at the deadline."""
        deadline = time.monotonic() + timeout_s
        while (left := self.executor_pids()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    def kill_executor(self, pid: int) -> None:
        """SIGKILL executor *pid* and its Python workers (its process group)."""
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(OSError):
                kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        """Kill the executors, the workers and the master; delete the folder. Idempotent."""
        for pid in self.executor_pids():
            self.kill_executor(pid)
        for proc in reversed(self._procs):
            kill_tree(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        for lifeline in self._lifelines:
            lifeline.release()
        self._procs, self._lifelines = [], []
        self._remove_tmp()

