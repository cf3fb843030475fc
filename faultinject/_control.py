"""The control channel of remote fault actions: a rule fires in a job's process, the process that
owns the proxies and servers performs it. :class:`FaultControl` listens on a unix socket in a
private (0700) folder exported as ``TWOPC_FAULT_CONTROL``; a fired ``proxy`` or ``server`` rule
sends one JSON line and waits for the answer, so the fault is in force before it goes on."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import socket
import socketserver
import tempfile
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ._env import ENV_CONTROL
from ._errors import FaultControlError
from ._spec import FaultRule

if TYPE_CHECKING:
    from ._proxy import FaultProxy

#: How long a process that fired a rule waits for the owner (a server restart included).
ANSWER_TIMEOUT_S = 180.0


class _Server(Protocol):
    def crash(self) -> None: ...

    def restart(self) -> None: ...

    @property
    def running(self) -> bool: ...


def request_remote_fault(rule: FaultRule, line: str) -> None:
    """Ask the :class:`FaultControl` of ``TWOPC_FAULT_CONTROL`` to perform *rule*, wait until it has;
    FaultControlError when there is no channel, no answer, or the owner failed."""
    path = os.environ.get(ENV_CONTROL, "")
    what = f"fault rule {rule.to_spec()!r}"
    if not path:
        raise FaultControlError(
            f"{what} fired but {ENV_CONTROL} is not set: proxy and server actions are performed by the "
            f"process that owns them; start a faultinject.FaultControl there and pass its env to the job")
    request = json.dumps({**rule.remote_request(), "line": line}).encode() + b"\n"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(ANSWER_TIMEOUT_S)
            sock.connect(path)
            sock.sendall(request)
            answer = sock.makefile("rb").readline()
    except OSError as exc:
        raise FaultControlError(f"{what}: the fault control at {path} did not answer ({exc}); is its owner "
                                f"still running?") from None
    try:
        reply = json.loads(answer)
    except ValueError:
        raise FaultControlError(f"{what}: the fault control at {path} closed without an answer") from None
    if not reply.get("ok"):
        raise FaultControlError(f"{what}: {reply.get('error', 'failed')}")


class FaultControl:
    """Owns named proxies and servers and performs the ``proxy``/``server`` rules fired elsewhere.

    Server faults: ``crash`` (the server's :meth:`crash`, then a restart with crash recovery;
    answered once it is back), ``restart`` (graceful), ``down`` (a crash, the restart ``for``
    seconds later; answered at once). Proxy faults: ``reset``; ``blackhole`` for ``for`` seconds
    (default 2), then every connection reset, as keepalive or a firewall would; ``latency`` of
    ``delay`` (0.2 s) for ``for`` seconds (2); ``swallow_reply`` of the next request with
    ``pattern``, its connection reset ``for`` seconds (2) later; ``heal``. *fired* counts the
    faults performed by kind, *errors* lists what failed (also answered to the asker)."""

    def __init__(self) -> None:
        self.fired: collections.Counter[str] = collections.Counter()
        self.errors: list[str] = []
        self._servers: dict[str, _Server] = {}
        self._proxies: dict[str, FaultProxy] = {}
        self._locks: dict[str, threading.Lock] = collections.defaultdict(threading.Lock)
        self._timers: list[threading.Timer] = []
        self._guard = threading.Lock()
        self._dir: str | None = None
        self._server: socketserver.ThreadingUnixStreamServer | None = None

    def add_server(self, name: str, server: _Server) -> FaultControl:
        """Own *server* (a ``Local*`` server) as *name*."""
        self._servers[name] = server
        return self

    def add_proxy(self, name: str, proxy: FaultProxy) -> FaultControl:
        """Own *proxy* (a started :class:`FaultProxy`) as *name*."""
        self._proxies[name] = proxy
        return self

    @property
    def path(self) -> str:
        """The unix socket's path (after :meth:`start`)."""
        if self._dir is None:
            raise FaultControlError("FaultControl has not been started")
        return os.path.join(self._dir, "control.sock")

    def env(self) -> dict[str, str]:
        """``{"TWOPC_FAULT_CONTROL": path}``: add it to the job's environment."""
        return {ENV_CONTROL: self.path}

    def start(self) -> FaultControl:
        """Listen, in a daemon thread. Returns *self*."""
        if self._server is not None:
            return self
        self._dir = tempfile.mkdtemp(prefix="twopc-ctl-")
        os.chmod(self._dir, 0o700)
        owner = self
        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                try:
                    request = json.loads(self.rfile.readline())
                    owner.perform(request["action"], request["target"], request["fault"], request.get("params", {}))
                    reply: dict[str, Any] = {"ok": True}
                except Exception as exc:  # noqa: BLE001 - every failure is answered to the process that asked
                    reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                    owner.errors.append(reply["error"])
                with contextlib.suppress(OSError):
                    self.wfile.write(json.dumps(reply).encode() + b"\n")
        server = socketserver.ThreadingUnixStreamServer(self.path, Handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, name="faultcontrol", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop listening; wait for pending delayed actions (a ``down`` server's restart). Idempotent."""
        self.settle()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> FaultControl:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def perform(self, action: str, target: str, fault: str, params: Mapping[str, Any]) -> None:
        """Perform one fault now (as a fired rule asks; tests may call it); FaultControlError for an
        unknown target or fault, ServerUnavailable when a server did not come back."""
        owned = self._servers if action == "server" else self._proxies if action == "proxy" else None
        if owned is None:
            raise FaultControlError(f"unknown remote action {action!r}: proxy or server")
        if target not in owned:
            raise FaultControlError(f"no {action} named {target!r} (known: {sorted(owned)})")
        if action == "server":
            with self._locks[target]:
                self._server_fault(target, self._servers[target], fault, params)
        else:
            self._proxy_fault(self._proxies[target], fault, params)
        self.fired[f"{action}.{fault}"] += 1

    def _server_fault(self, name: str, server: _Server, fault: str, params: Mapping[str, Any]) -> None:
        if fault == "crash":
            server.crash()
            server.restart()
        elif fault == "restart":
            server.restart()
        elif fault == "down":
            server.crash()
            self._later(float(params.get("for", 2.0)), lambda: self._bring_back(name, server))
        else:
            raise FaultControlError(f"unknown server fault {fault!r}: crash, restart or down")

    def _bring_back(self, name: str, server: _Server) -> None:
        with self._locks[name]:
            if not server.running:
                server.restart()

    def _proxy_fault(self, proxy: FaultProxy, fault: str, params: Mapping[str, Any]) -> None:
        seconds = float(params.get("for", 2.0))
        direction = params.get("direction", "both")
        if fault == "reset":
            proxy.reset()
        elif fault == "blackhole":
            proxy.blackhole(direction, seconds)
            self._later(seconds, proxy.reset)
        elif fault == "latency":
            proxy.add_latency(float(params.get("delay", 0.2)), direction)
            self._later(seconds, lambda: proxy.add_latency(0.0, direction))
        elif fault == "swallow_reply":
            proxy.swallow_reply(str(params["pattern"]), times=1)
            def reset_swallowing() -> None:
                for conn in proxy.connections():
                    if conn.swallowing:
                        conn.reset()
            self._later(seconds, reset_swallowing)
        elif fault == "heal":
            proxy.heal()
        else:
            raise FaultControlError(f"unknown proxy fault {fault!r}: reset, blackhole, latency, swallow_reply or heal")

    def _later(self, seconds: float, fn: Callable[[], object]) -> None:
        def run() -> None:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - a timer thread has no one to raise to: recorded
                self.errors.append(f"{type(exc).__name__}: {exc}")
        timer = threading.Timer(seconds, run)
        timer.daemon = True
        with self._guard:
            self._timers.append(timer)
        timer.start()

    def settle(self) -> None:
        """End every fault in force (the state a model check after a schedule needs): cancel delayed
        actions, heal every proxy and reset its connections, bring every server back up."""
        with self._guard:
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.cancel()
            timer.join()
        for proxy in self._proxies.values():
            proxy.heal()
            proxy.reset()
        for name, server in self._servers.items():
            self._bring_back(name, server)
