"""``python -P <this file> <folder> <key> <driver> <owner file>``: the driver agent, twopc's one long-lived process
per Spark driver. Spark's Python workers are killed and restarted at will, so the agent holds the driver's writers'
leases (server sessions, see :mod:`twopc.sinks.sql._target_ledger`) and serves the ``metricsPort`` metrics. It runs
in a session of its own and ends when its driver is gone (checked every 0.2 s), on SIGTERM, or when killed; the
server then ends its sessions and locks.

It listens at ``<folder>/<pid>.sock`` (``<folder>`` is ``0700``: requests carry credentials),
notes ``<pid> <start time>`` in ``<key>.pid`` once listening, and holds ``<key>.lock`` for life
(one agent per driver). A request is one JSON line, its answer one line of words:

- ``take``: connect (DB-API ``module``, ``connect`` arguments), run ``try_lock`` with ``key``
  and ``session_sql``, keep the connection: ``held <session>``, ``busy`` or ``error <kind>``
  (a kind only: a driver's message may name the login);
- ``release``: close lease (``sink_id``, ``session``): ``released`` or ``unknown``;
- ``serve``: serve ``<registry>/*.ckpt``'s metrics on ``port`` and ``host``: ``serving`` or ``error <kind>``.

A lease's ``record`` file is deleted when it ends (unless it names another holder), a served registry folder when the
agent ends. To start fast it imports only the standard library, the DB-API driver and *owner file*
(:mod:`twopc._driver_identity`); ``prometheus_client`` and ``twopc.operations._metrics`` when first needed."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import importlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

POLL_SECONDS = 0.2
#: the exit status of an agent that found its driver's agent running already
ALREADY_RUNNING = 3
_REQUEST_SECONDS = 60.0  # to read a request's line (a bound for a client that connects and says nothing)


def _owner_module(path: str) -> ModuleType:
    """:mod:`twopc._driver_identity` from its file *path* (importing ``twopc`` would load pyspark)."""
    spec = importlib.util.spec_from_file_location("_twopc_owner_for_agent", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


class _Checkpoints:
    """A Prometheus collector of a folder's registered checkpoints, importing twopc at the first scrape."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._inner: Any = None

    def _checkpoints(self) -> list[str]:
        out = []
        for f in sorted(self.folder.glob("*.ckpt")):
            with contextlib.suppress(OSError):
                out.append(f.read_text(encoding="utf-8").strip())
        return [c for c in out if c]

    def collect(self) -> Iterator[Any]:
        if self._inner is None:
            root = str(Path(__file__).resolve().parents[2])
            if root not in sys.path:
                sys.path.insert(0, root)  # the twopc next to this file, whatever is installed
            metrics = importlib.import_module("twopc.operations._metrics_export")
            self._inner = metrics.MetricsCollector(self._checkpoints)
        yield from self._inner.collect()


class Agent:
    """The leases and served ports of one driver."""

    def __init__(self, folder: Path, key: str, driver: dict[str, Any]) -> None:
        self.folder = folder
        self.key = key
        self.driver = driver
        self.pid = os.getpid()
        self.sock = folder / f"{self.pid}.sock"
        self.pidfile = folder / f"{key}.pid"
        self._guard = threading.Lock()
        #: (sink id, session) -> (the connection holding the lock, the lease's record or None)
        self.leases: dict[tuple[str, int], tuple[Any, str | None]] = {}
        #: port -> the registry folder served there
        self.ports: dict[int, Path] = {}

    # -- the requests -----------------------------------------------------------------------
    def answer(self, request: dict[str, Any]) -> str:
        op = request.get("op")
        if op == "take":
            return self.take(request)
        if op == "release":
            return self.release(str(request["sink_id"]), int(request["session"]))
        if op == "serve":
            return self.serve(int(request["port"]), str(request["host"]), Path(request["registry"]))
        return "error UnknownRequest"

    def take(self, cfg: dict[str, Any]) -> str:
        """Take a lease; a connection that outlasted its bound (the requester stopped waiting) is closed."""
        deadline = time.monotonic() + float(cfg["bound_seconds"])
        conn = None
        try:
            conn = importlib.import_module(cfg["module"]).connect(**cfg["connect"], autocommit=True)
            cur = conn.cursor()
            cur.execute(cfg["try_lock"], (cfg["key"],))
            got = bool(cur.fetchone()[0])
            cur.execute(cfg["session_sql"])
            session = int(cur.fetchone()[0])
        except Exception as exc:  # noqa: BLE001 - any failure is answered by kind only (a driver's message may name the login)
            self._close(conn)
            return f"error {type(exc).__name__}"
        if time.monotonic() > deadline:
            self._close(conn)
            return "error Timeout"
        if not got:
            self._close(conn)
            return "busy"
        with self._guard:
            if (cfg["sink_id"], session) in self.leases:  # one session id on two servers: never mix them up
                self._close(conn)
                return "error SessionIdInUse"
            self.leases[(cfg["sink_id"], session)] = (conn, cfg.get("record"))
        return f"held {session}"

    def release(self, sink_id: str, session: int) -> str:
        with self._guard:
            held = self.leases.pop((sink_id, session), None)
        if held is None:
            return "unknown"
        self._close(held[0])
        self._forget_record(held[1], session)
        return "released"

    def serve(self, port: int, host: str, registry: Path) -> str:
        """Serve *registry*'s checkpoints' metrics on *port* (once per port)."""
        with self._guard:
            if port in self.ports:
                return "serving"
            from prometheus_client import CollectorRegistry, start_http_server
            collectors = CollectorRegistry()
            collectors.register(_Checkpoints(registry))
            try:
                start_http_server(port, addr=host, registry=collectors)
            except OSError as exc:
                return f"error {type(exc).__name__}"
            self.ports[port] = registry
            (registry / "server.pid").write_text(str(self.pid), encoding="ascii")
        return "serving"

    @staticmethod
    def _close(conn: Any) -> None:
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _forget_record(self, record: str | None, session: int) -> None:
        """Delete a lease's record unless it names another holder by now."""
        if not record:
            return
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            with open(record, encoding="utf-8") as f:
                lease = json.load(f)["lease"]
            if lease["holder_pid"] == self.pid and int(lease["session"]) == session:
                os.unlink(record)

    # -- the lifecycle ----------------------------------------------------------------------
    def end(self) -> None:
        """Delete this agent's socket, pid file, lease records and served registries."""
        with contextlib.suppress(OSError):
            if self.pidfile.read_text(encoding="ascii").split()[0] == str(self.pid):
                self.pidfile.unlink()
        _unlink(self.sock)
        for (_sink_id, session), (_conn, record) in list(self.leases.items()):
            self._forget_record(record, session)
        for registry in self.ports.values():
            with contextlib.suppress(OSError):
                if (registry / "server.pid").read_text(encoding="ascii").strip() == str(self.pid):
                    shutil.rmtree(registry, ignore_errors=True)
                    if registry.parent.name.startswith("twopc-metrics-"):
                        registry.parent.rmdir()  # only when no other port's folder is in it
        _unlink(self.folder / f"{self.key}.log")
        _unlink(self.folder / f"{self.key}.lock")  # as the last thing before the exit: a new agent makes it again

    def handle(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn, conn.makefile("rw", encoding="ascii") as channel:
            if not (line := channel.readline()):
                return
            try:
                request = json.loads(line, object_hook=_plain)
                answer = self.answer(request) if isinstance(request, dict) else "error NotAnObject"
            except Exception as exc:  # noqa: BLE001 - a malformed request is answered by kind only
                answer = f"error {type(exc).__name__}"
            channel.write(answer + "\n")
            channel.flush()


def _plain(obj: dict[str, Any]) -> Any:
    """A request's object, ``{"bytes": <base64>}`` back as bytes."""
    return base64.b64decode(obj["bytes"]) if len(obj) == 1 and isinstance(obj.get("bytes"), str) else obj


def _sweep(folder: Path) -> None:
    """Remove what killed agents left: sockets of gone processes, files of a driver nobody locks."""
    for sock in (s for s in folder.glob("*.sock") if s.stem.isdigit()):
        try:
            os.kill(int(sock.stem), 0)
        except ProcessLookupError:
            _unlink(sock)
        except OSError:
            pass
    for lockfile in folder.glob("*.lock"):
        with contextlib.suppress(OSError):
            fd = os.open(lockfile, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no agent of that driver runs
                for suffix in (".pid", ".log", ".lock"):
                    _unlink(lockfile.with_suffix(suffix))
            finally:
                os.close(fd)


def _take_lock(path: Path, attempts: int = 200) -> int | None:
    """The driver's lock file, locked for this agent's life, or None when another agent holds it. A
    refusal by another agent's momentary :func:`_sweep`, or a lock on a file it just removed, is
    retried, so a starting agent never gives up to a sweep and no driver has two lock files."""
    for _ in range(attempts):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            if (path.parent / (path.stem + ".pid")).exists():
                return None  # an agent of this driver runs (it writes its pid file once it listens)
            time.sleep(0.005)  # a sweep's moment, or an agent about to listen
            continue
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        os.close(fd)  # a sweep removed the file this lock is on: lock the new one
    return None


def main(argv: list[str]) -> int:
    folder, key, driver, owner_file = Path(argv[0]), argv[1], json.loads(argv[2]), argv[3]
    if _take_lock(folder / f"{key}.lock") is None:
        return ALREADY_RUNNING
    owner = _owner_module(owner_file)
    agent = Agent(folder, key, driver)
    _sweep(folder)
    def stop(_signum: int, _frame: Any) -> None:
        agent.end()
        os._exit(0)
    signal.signal(signal.SIGTERM, stop)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    new = folder / f"{agent.pid}.sock.new"
    _unlink(new)
    listener.bind(str(new))
    listener.listen(64)
    os.rename(new, agent.sock)
    started = owner._start_ticks(agent.pid) or 0
    tmp = folder / f".{key}.{agent.pid}.tmp"
    tmp.write_text(f"{agent.pid} {started}", encoding="ascii")
    os.replace(tmp, agent.pidfile)  # clients find it from now on
    listener.settimeout(POLL_SECONDS)
    while not owner.provably_dead(driver):
        try:
            conn, _addr = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(_REQUEST_SECONDS)
        threading.Thread(target=agent.handle, args=(conn,), daemon=True).start()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    agent.end()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
