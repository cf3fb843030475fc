"""The ``metricsPort`` metrics server, served by the driver agent (:mod:`twopc.ledger._agent`).
:func:`ensure_server` registers the checkpoint in ``<tempdir>/twopc-metrics-<uid>/<port>/`` and,
unless a live agent serves the port (``server.pid``), asks its driver's agent to serve it."""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .._driver_identity import DriverIdentity
from .._errors import ConfigurationError
from .._host_dirs import private_dir
from .._runtime_options import option
from ..ledger._agent_client import DriverAgent

__all__ = ["LOOPBACK", "ensure_server", "metrics_port", "registry_dir"]

#: Where the server listens unless ``metricsHost`` names an interface: this machine only.
LOOPBACK = "127.0.0.1"
_REGISTRY = "twopc-metrics"
_REPLY_SECONDS = 30.0  # for the agent to bind the port (a bound, not an expected time)


def metrics_port(options: Mapping[str, str]) -> tuple[int, str] | None:
    """``(metricsPort, metricsHost)`` (the interface; default loopback, ``0.0.0.0`` for all), or None.
    Raises ConfigurationError: the port is not a number in 1..65535."""
    text = option(options, "metricsPort")
    if text is None or not text.strip():
        return None
    if not text.strip().isdigit() or not 0 < int(text) < 65536:
        raise ConfigurationError(f"metricsPort must be a TCP port number (1-65535), got {text!r}")
    return int(text), (option(options, "metricsHost") or "").strip() or LOOPBACK


def registry_dir(port: int) -> Path:
    """``<temp dir>/twopc-metrics-<uid>/<port>/`` (``0700``), made when missing.
    Raises ConfigurationError: a folder of that name is not this user's alone."""
    if (folder := private_dir(_REGISTRY, str(port))) is None:
        raise ConfigurationError(
            f"metricsPort {port}: {Path(tempfile.gettempdir(), f'{_REGISTRY}-{os.getuid()}', str(port))} is not a "
            f"folder of this user's alone (mode 0700, owned by uid {os.getuid()}): remove it and start again")
    return folder


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1" if host in ("", "0.0.0.0") else host, port)) == 0


def ensure_server(port: int, checkpoint_location: str, *, host: str = LOOPBACK,
                  driver: DriverIdentity | None = None) -> bool:
    """Register *checkpoint_location* for *port* and have *driver*'s agent serve it unless an agent
    does; True when this call had it served.
    Raises ConfigurationError: the port is taken by another program."""
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
    _pid, answer = DriverAgent(driver).request({"op": "serve", "port": port, "host": host, "registry": str(folder)},
                                               _REPLY_SECONDS)
    if answer != ["serving"]:
        why = " ".join(answer[1:]) or "no answer"
        raise ConfigurationError(f"metricsPort {port}: the driver agent could not serve it ({why}): choose a free port")
    return True
