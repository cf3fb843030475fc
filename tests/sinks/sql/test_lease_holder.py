"""The lease holder (sinks.sql._lease_holder) starts once per write without a checkpoint, so it
must start fast: it takes the lease on the real server importing neither pyspark, pyarrow,
SQLAlchemy nor twopc's packages (their import took seconds per write on a busy machine),
and the lease is free again once it is told to end."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from sinks import MySqlXaSink, PostgresSink
from sinks.sql import PreparedSqlSink
from sinks.sql._lease_spares import spare_folder, start_spare
from sinks.sql._target_ledger import _holder_argv
from twopc import ConcurrentWriterError, Lease
from twopc._owner import DriverIdentity, _start_ticks, driver_identity

HEAVY = {"pyspark", "pyarrow", "sqlalchemy", "pandas", "numpy", "twopc", "sinks", "recovery", "faultinject"}


@pytest.mark.parametrize("server", ["postgres", "mariadb"])
def test_the_lease_holder_takes_the_lease_without_the_heavy_imports(server, request) -> None:
    url = request.getfixturevalue(f"{server}_url")
    sink: PreparedSqlSink[Any, Any] = (PostgresSink if server == "postgres" else MySqlXaSink)(url, "lh_unused")
    backend = sink.target_ledger()
    sink_id = f"lh-{uuid.uuid4().hex[:8]}"
    argv, payload = backend.holder_command(sink_id, driver_identity())
    proc = subprocess.Popen([argv[0], "-X", "importtime", *argv[1:]], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(payload + "\n")
        proc.stdin.close()
        answer = proc.stdout.readline().split()
        assert answer[:1] == ["held"], answer
        lease = Lease(sink_id, int(answer[1]), proc.pid, _start_ticks(proc.pid) or 0, "")
        assert backend.holds(lease)
    finally:
        proc.terminate()
        imports = proc.stderr.read()
        proc.wait(timeout=60)
    top = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in imports.splitlines()
           if line.startswith("import time:")}
    assert "psycopg" in top or "pymysql" in top  # the check sees the driver's import
    assert sorted(top & HEAVY) == []
    deadline = time.monotonic() + 30
    while backend.holds(lease) and time.monotonic() < deadline:  # the server notices the closed session
        time.sleep(0.05)
    assert not backend.holds(lease)
    sink.close()


def _waiting_spares(folder: Any) -> list[int]:
    return sorted(int(p.stem) for p in folder.glob("*.sock"))


def _wait_for(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + 60  # a bound, not a measured duration: a spare starts in well under a second
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _ended(pid: int) -> bool:
    return os.waitpid(pid, os.WNOHANG)[0] == pid


def test_a_released_lease_leaves_a_spare_holder_that_the_next_write_claims(postgres_url) -> None:
    """The holder's start (an interpreter and the driver's import) is paid between writes:
    releasing a lease starts a spare for the driver; the next acquire is answered by that
    spare (its pid is the lease's holder) and holds the lock for real; a second write with
    the same sink id is still refused (answered by a spare too); a spare whose driver is
    gone ends."""
    sink = PostgresSink(postgres_url, "lh_unused")
    backend = sink.target_ledger()
    driver = driver_identity()
    folder = spare_folder(driver, "psycopg")
    assert folder is not None and (folder.stat().st_mode & 0o777) == 0o700
    first = backend.acquire(f"lh-{uuid.uuid4().hex[:8]}")
    backend.release(first)
    _wait_for(lambda: _waiting_spares(folder), "a spare after the release")
    spares = _waiting_spares(folder)  # this test's, or one an earlier test of this process left waiting
    sink_id = f"lh-{uuid.uuid4().hex[:8]}"
    lease = backend.acquire(sink_id)
    assert lease.holder_pid == spares[0] and backend.holds(lease)  # the oldest pid is claimed first
    assert lease.holder_pid not in _waiting_spares(folder)  # claimed: no other write can have it
    second = start_spare(_holder_argv(), folder, driver=driver, module="psycopg", bound_seconds=30) or spares[1]
    _wait_for(lambda: second in _waiting_spares(folder), "a second spare")
    with pytest.raises(ConcurrentWriterError):
        backend.acquire(sink_id)  # answered "busy" by the second spare, which then ends
    _wait_for(lambda: _ended(second), "the spare that answered busy to end")
    backend.release(lease)
    _wait_for(lambda: not backend.holds(lease), "the lease to be free")
    sink.close()
    # a spare of a driver that is gone ends (and removes its socket)
    dead = DriverIdentity(host=driver["host"], pid=2**22 + 7, started=1)  # above Linux's pid_max default
    dead_folder = spare_folder(dead, "psycopg")
    assert dead_folder is not None
    pid = start_spare(_holder_argv(), dead_folder, driver=dead, module="psycopg", bound_seconds=30)
    assert pid is not None
    _wait_for(lambda: _ended(pid), "the dead driver's spare to end")
    assert _waiting_spares(dead_folder) == []


def test_spare_folders_are_swept_and_not_used_when_others_can_open_them(monkeypatch) -> None:
    """The line a spare receives carries the login: a spare folder that is not the user's
    alone is not used (the write starts its own holder). What killed spares leave behind is
    swept."""
    short = Path(tempfile.mkdtemp(prefix="sp"))  # a unix socket's path must stay short
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(short))
        driver = driver_identity()
        assert spare_folder(driver, "psycopg") is not None
        root = short / f"twopc-lease-spares-{os.getuid()}"
        # what a SIGKILLed spare leaves is swept by the next write: its socket, then its empty folder
        stale = root / "0123456789abcdef"
        stale.mkdir(mode=0o700)
        (stale / f"{2**22 + 7}.sock").touch()
        os.utime(stale, (time.time() - 120, time.time() - 120))
        assert spare_folder(driver, "psycopg") is not None
        assert not (stale / f"{2**22 + 7}.sock").exists()
        os.utime(stale, (time.time() - 120, time.time() - 120))  # the unlink made it new again
        assert spare_folder(driver, "psycopg") is not None and not stale.exists()
        root.chmod(0o755)
        assert spare_folder(driver, "psycopg") is None
    finally:
        shutil.rmtree(short)


def test_a_spare_that_ends_without_answering_costs_the_write_nothing(postgres_url) -> None:
    """A spare whose idle time runs out just as a write claims it closes the connection
    without an answer: the write starts a holder of its own and gets its lease."""
    import socket
    import threading

    sink = PostgresSink(postgres_url, "lh_unused")
    backend = sink.target_ledger()
    folder = spare_folder(driver_identity(), "psycopg")
    assert folder is not None
    for old in folder.glob("*.sock"):  # spares of earlier tests of this process: not this test's
        old.unlink()
    fake = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fake.bind(str(folder / f"{os.getpid()}.sock"))  # a pid that is no lease holder: never killed
    fake.listen(1)

    def end_at_once() -> None:
        conn, _ = fake.accept()
        conn.close()

    t = threading.Thread(target=end_at_once)
    t.start()
    lease = backend.acquire(f"lh-{uuid.uuid4().hex[:8]}")
    t.join(timeout=60)
    fake.close()
    assert not t.is_alive()  # the write did claim the fake spare first
    assert lease.holder_pid != os.getpid() and backend.holds(lease)
    assert not (folder / f"{os.getpid()}.claimed").exists()
    backend.release(lease)
    sink.close()
