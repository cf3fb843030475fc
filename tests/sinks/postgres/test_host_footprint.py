"""What twopc leaves on the driver's host while a driver runs: folders of the user's alone
(``0700``, the uid in their name), deleted by the process that made them when it ends. A
record a killed process could not delete is deleted by the next use."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from twopc import CommitLedger
from twopc._driver_identity import _start_ticks, identity_of
from twopc.ledger._agent_client import DriverAgent
from twopc.operations._metrics_server import ensure_server, registry_dir
from twopc.sinks import PostgresSink
from twopc.spi.lease import Lease


def _private(folder: Path) -> bool:
    st = folder.lstat()
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700


def _wait_for(check: Callable[[], bool], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_metrics_servers_folder_is_the_users_own_and_ends_with_the_server(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    CommitLedger(str(ck)).bind_sink_id(None, default="job1")
    for stop in ("sigterm", "driver gone"):
        port = _free_port()
        folder = registry_dir(port)
        assert folder == Path(tempfile.gettempdir(), f"twopc-metrics-{os.getuid()}", str(port))
        assert _private(folder.parent) and _private(folder)
        if stop == "sigterm":  # served by the agent of this process's driver (this test has no JVM to watch)
            assert ensure_server(port, str(ck))
        else:  # by the agent of a process that stands for the driver's JVM
            driver = subprocess.Popen(["sleep", "600"])
            assert ensure_server(port, str(ck), driver=identity_of(driver.pid))
        pidfile = folder / "server.pid"
        _wait_for(pidfile.exists, "the server to start")
        server = int(pidfile.read_text())
        assert sorted(p.name for p in folder.iterdir() if p.suffix != ".ckpt") == ["server.pid"]
        if stop == "sigterm":
            os.kill(server, signal.SIGTERM)
        else:
            driver.kill()
            driver.wait()
        _wait_for(lambda: _start_ticks(server) is None, "the server to end")  # noqa: B023 - used at once
        assert not folder.exists(), sorted(folder.iterdir())


def test_a_streaming_querys_lease_record_is_private_and_goes_with_its_holder(postgres_url: str) -> None:
    sink = PostgresSink(postgres_url, "hf_unused")
    backend = sink.target_ledger()
    a, b = (f"hf-{uuid.uuid4().hex[:8]}" for _ in range(2))
    record = backend._record(a)
    assert record.parent == Path(tempfile.gettempdir(), f"twopc-leases-{os.getuid()}") and _private(record.parent)

    # the agent of a driver that ends deletes the record its driver kept of its lease
    driver = subprocess.Popen(["sleep", "600"])
    holder, answer = DriverAgent(identity_of(driver.pid)).request(backend.lease_request(a, record=record), 60)
    assert answer[:1] == ["held"], answer
    lease = Lease(a, int(answer[1]), holder, _start_ticks(holder) or 0, socket.gethostname())
    record.write_text(json.dumps({"lease": dataclasses.asdict(lease), "driver": dict(identity_of(driver.pid))}))
    driver.kill()
    driver.wait()
    _wait_for(lambda: _start_ticks(holder) is None, "the agent to end with its driver")
    assert not record.exists()

    # a killed holder cannot: the next streaming query's plan deletes its record; a released lease's goes too
    kept = backend.acquire(a, keep=True)
    assert json.loads(record.read_text())["lease"]["holder_pid"] == kept.holder_pid
    os.kill(kept.holder_pid, signal.SIGKILL)
    _wait_for(lambda: _start_ticks(kept.holder_pid) is None, "the holder to end")
    other = backend.acquire(b, keep=True)
    assert not record.exists() and backend._record(b).exists()
    backend.release(other)
    _wait_for(lambda: not backend._record(b).exists(), "the released holder to delete its record")
    sink.close()
