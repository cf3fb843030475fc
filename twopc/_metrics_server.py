"""The metrics server the writer option ``metricsPort`` starts: one process per port that
outlives Spark's Python workers and ends with the Spark driver (JVM) that started it.

A query's plan-time process calls :func:`ensure_server`: it registers the query's
checkpoint in ``<tempdir>/twopc-metrics-<uid>/<port>/`` (this user's alone, see
:mod:`twopc._host_dirs`) and, unless a live server owns the port already, starts
``python -m twopc._metrics_server`` in a session of its own (Spark's process-group kills
and worker recycling do not touch it), its output in ``server.log`` there. The server
serves every checkpoint registered for its port, re-reading the folder at each scrape, and
exits when the JVM it watches is gone (or on SIGTERM), deleting the port's folder (the
next plan of a query on that port makes it again and starts a server).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server

from ._errors import ConfigurationError
from ._host_dirs import private_dir
from ._metrics import MetricsCollector
from ._runtime_options import option

__all__ = ["LOOPBACK", "ensure_server", "main", "metrics_port"]

#: Where the server listens unless ``metricsHost`` names an interface: this machine only.
LOOPBACK = "127.0.0.1"
_REGISTRY = "twopc-metrics"


def metrics_port(options: Mapping[str, str]) -> tuple[int, str] | None:
    """The ``metricsPort`` (and ``metricsHost``: the interface to listen on, default
    loopback only, ``0.0.0.0`` for every interface) writer options.

    Raises:
        ConfigurationError: the port is not a number in 1..65535.
    """
    text = option(options, "metricsPort")
    if text is None or not text.strip():
        return None
    if not text.strip().isdigit() or not 0 < int(text) < 65536:
        raise ConfigurationError(f"metricsPort must be a TCP port number (1-65535), got {text!r}")
    return int(text), (option(options, "metricsHost") or "").strip() or LOOPBACK


def registry_dir(port: int) -> Path:
    """``<temp dir>/twopc-metrics-<uid>/<port>/``, this user's alone (``0700``), made when missing.

    Raises:
        ConfigurationError: a folder of that name is not this user's alone.
    """
    folder = private_dir(_REGISTRY, str(port))
    if folder is None:
        raise ConfigurationError(
            f"metricsPort {port}: {Path(tempfile.gettempdir(), f'{_REGISTRY}-{os.getuid()}', str(port))} is not a "
            f"folder of this user's alone (mode 0700, owned by uid {os.getuid()}): remove it and start again")
    return folder


def _remove_registry(folder: Path) -> None:
    """Delete the registry *folder* of a server that ends, and its parent once empty."""
    shutil.rmtree(folder, ignore_errors=True)
    if folder.parent.name.startswith(f"{_REGISTRY}-"):
        with contextlib.suppress(OSError):
            folder.parent.rmdir()  # only when no other port's folder is in it


def _checkpoints(folder: Path) -> list[str]:
    out = []
    for f in sorted(folder.glob("*.ckpt")):
        with contextlib.suppress(OSError):
            out.append(f.read_text(encoding="utf-8").strip())
    return [c for c in out if c]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def spark_jvm_pid() -> int | None:
    """The pid of the JVM among this process's ancestors (Linux ``/proc``), else None."""
    pid = os.getpid()
    for _ in range(16):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        comm = stat[stat.index("(") + 1: stat.rindex(")")]
        if comm == "java":
            return pid
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
        if pid <= 1:
            return None
    return None


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1" if host in ("", "0.0.0.0") else host, port)) == 0


def ensure_server(port: int, checkpoint_location: str, *, host: str = LOOPBACK) -> bool:
    """Register *checkpoint_location* for *port* and start the server unless one runs.
    Returns True when this call started it.

    Raises:
        ConfigurationError: the port is taken by a program that is not a twopc metrics
            server.
    """
    key = hashlib.sha256(checkpoint_location.encode("utf-8")).hexdigest()[:16]
    for attempt in range(3):  # a server that ends removes the folder: make it again
        folder = registry_dir(port)
        entry = folder / f"{key}.ckpt"
        try:
            if not entry.exists():
                tmp = folder / f".{key}.{os.getpid()}.tmp"
                tmp.write_text(checkpoint_location, encoding="utf-8")
                os.replace(tmp, entry)
            break
        except FileNotFoundError:
            if attempt == 2:
                raise
    pidfile = folder / "server.pid"
    with contextlib.suppress(OSError, ValueError):
        if _alive(int(pidfile.read_text().strip())):
            return False
    for stale in folder.glob("*.ckpt"):  # queries of a server that is gone
        if stale != entry:
            with contextlib.suppress(OSError):
                stale.unlink()
    if _port_open(host, port):
        raise ConfigurationError(f"metricsPort {port} is in use by another program: choose a free port")
    jvm = spark_jvm_pid()
    args = [sys.executable, "-m", "twopc._metrics_server", "--port", str(port), "--host", host,
            "--registry", str(folder)]
    if jvm is not None:
        args += ["--watch-pid", str(jvm)]
    with open(folder / "server.log", "ab") as logf:
        subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True,
                         close_fds=True)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m twopc._metrics_server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default=LOOPBACK, help="the interface to listen on (0.0.0.0: every one)")
    parser.add_argument("--registry", required=True, help="folder of *.ckpt files naming checkpoints")
    parser.add_argument("--watch-pid", type=int, help="exit when this process (the Spark JVM) is gone")
    args = parser.parse_args(argv)
    folder = Path(args.registry)
    registry = CollectorRegistry()
    registry.register(MetricsCollector(lambda: _checkpoints(folder)))
    try:
        start_http_server(args.port, addr=args.host, registry=registry)
    except OSError as exc:  # another server won the race for the port
        print(f"twopc metrics server: cannot bind port {args.port}: {exc}", file=sys.stderr)
        return 1
    pidfile = folder / "server.pid"
    pidfile.write_text(str(os.getpid()))
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(0))  # a stop removes the folder too
    try:
        while args.watch_pid is None or _alive(args.watch_pid):
            time.sleep(1.0)
    finally:
        with contextlib.suppress(OSError):
            if pidfile.read_text().strip() == str(os.getpid()):
                pidfile.unlink()
                _remove_registry(folder)  # the folder is this server's: a later query's plan makes it again
    return 0


if __name__ == "__main__":
    sys.exit(main())
