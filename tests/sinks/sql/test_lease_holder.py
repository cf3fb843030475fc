"""The driver agent (twopc.ledger._agent) holds a driver's writers' leases. Every write without a
checkpoint asks it, and the first write of a driver starts it, so it must start fast: it
takes the lease on the real server importing neither pyspark, pyarrow, SQLAlchemy nor
twopc's packages (their import took seconds per write on a busy machine); a released lease
is free again, and the agent ends with its driver."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from twopc import ConfigurationError, FencedError
from twopc._driver_identity import _start_ticks, identity_of
from twopc._target import open_target_ledger
from twopc.ledger._agent_client import DriverAgent, agent_folder, ask_agent
from twopc.sinks import MySqlXaSink, PostgresSink
from twopc.sinks.sql import PreparedSqlSink
from twopc.spi import ConcurrentWriterError
from twopc.spi.lease import Lease
from twopc.spi.operations import Decision

HEAVY = {"pyspark", "pyarrow", "sqlalchemy", "pandas", "numpy", "twopc"}


def _wait_for(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + 60  # a bound, not a measured duration
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("server", ["postgres", "mariadb"])
def test_the_agent_takes_the_lease_without_the_heavy_imports_and_ends_with_its_driver(server, request) -> None:
    url = request.getfixturevalue(f"{server}_url")
    sink: PreparedSqlSink[Any, Any] = (PostgresSink if server == "postgres" else MySqlXaSink)(url, "lh_unused")
    backend = sink.target_ledger()
    sink_id = f"lh-{uuid.uuid4().hex[:8]}"
    driver = subprocess.Popen(["sleep", "600"])  # stands for the driver's JVM
    agent = DriverAgent(identity_of(driver.pid))
    argv = agent.argv()
    proc = subprocess.Popen([argv[0], "-X", "importtime", *argv[1:]], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    try:
        _wait_for(lambda: agent.running() is not None, "the agent to listen")
        pid, answer = agent.request(backend.lease_request(sink_id), 60)
        assert pid == proc.pid and answer[:1] == ["held"], answer
        lease = Lease(sink_id, int(answer[1]), pid, _start_ticks(pid) or 0, "")
        assert backend.holds(lease)
        assert ask_agent(pid, {"op": "release", "sink_id": sink_id, "session": lease.session}, 60) == ["released"]
        _wait_for(lambda: not backend.holds(lease), "the released lease to be free")
        again, answer = agent.request(backend.lease_request(sink_id), 60)  # the same agent takes it again
        assert again == pid and answer[:1] == ["held"], answer
        lease = Lease(sink_id, int(answer[1]), pid, _start_ticks(pid) or 0, "")
    finally:
        driver.kill()
        driver.wait()
    assert proc.wait(timeout=60) == 0  # it ends with its driver, and its sessions with it
    imports = proc.stderr.read()
    top = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in imports.splitlines()
           if line.startswith("import time:")}
    assert "psycopg" in top or "pymysql" in top  # the check sees the driver's import
    assert sorted(top & HEAVY) == []
    _wait_for(lambda: not backend.holds(lease), "the server to notice the closed session")
    assert agent.running() is None and not (agent.folder / f"{proc.pid}.sock").exists()
    sink.close()


def test_a_drivers_writes_share_its_agent_and_a_taken_lease_is_refused(postgres_url) -> None:
    """The first write of a driver starts the agent; the next ones ask the same process,
    which refuses a sink id whose lease is held (by another write of the same driver too).
    An agent that was killed is replaced by the next write."""
    sink = PostgresSink(postgres_url, "lh_unused")
    backend = sink.target_ledger()
    first = backend.acquire(f"lh-{uuid.uuid4().hex[:8]}")
    sink_id = f"lh-{uuid.uuid4().hex[:8]}"
    lease = backend.acquire(sink_id)
    assert lease.holder_pid == first.holder_pid == DriverAgent().running() and backend.holds(lease)
    with pytest.raises(ConcurrentWriterError):
        backend.acquire(sink_id)
    backend.release(lease)
    _wait_for(lambda: not backend.holds(lease), "the lease to be free")
    assert backend.holds(first)  # the agent's other lease is not touched
    os.kill(first.holder_pid, signal.SIGKILL)  # its sessions end with it
    _wait_for(lambda: _start_ticks(first.holder_pid) is None, "the killed agent to be gone")
    _wait_for(lambda: not backend.holds(first), "the killed agent's lease to be free")
    replaced = backend.acquire(sink_id)
    assert replaced.holder_pid != first.holder_pid and backend.holds(replaced)
    assert not (agent_folder() / f"{first.holder_pid}.sock").exists()  # the new agent swept the old socket
    backend.release(replaced)
    sink.close()


def test_a_writer_that_lost_its_lease_records_no_decision(postgres_url) -> None:
    """A writer whose lease is gone (the session holding it ended: a zombie, whose transactions
    another writer may be resolving) is refused when it writes its decision, before any row."""
    sink = PostgresSink(postgres_url, "lh_unused")
    backend = sink.target_ledger()
    sink_id = f"lh-{uuid.uuid4().hex[:8]}"
    lease = backend.acquire(sink_id)
    ledger = open_target_ledger(backend, sink_id, lease=lease)
    ledger.bind_sink_id(sink_id, sink_id)
    backend.release(lease)
    _wait_for(lambda: not backend.holds(lease), "the lease to be free")
    with pytest.raises(FencedError, match="lost its lease"):
        ledger.record_decision(Decision(sink_id, 0, ()))
    assert ledger.decided_batches() == [] and ledger.recorded_sink_id() == sink_id
    backend.forget(sink_id)
    sink.close()


def test_the_agents_folder_is_the_users_own(monkeypatch) -> None:
    """The requests an agent receives carry the login: its folder must be the user's alone."""
    short = Path(tempfile.mkdtemp(prefix="ag"))  # a unix socket's path must stay short
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(short))
        folder = agent_folder()
        assert folder == short / f"twopc-agent-{os.getuid()}" and (folder.stat().st_mode & 0o777) == 0o700
        folder.chmod(0o755)
        with pytest.raises(ConfigurationError, match="not a folder of this user's alone"):
            agent_folder()
    finally:
        shutil.rmtree(short)
