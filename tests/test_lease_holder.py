"""The lease holder (sinks.sql._lease_holder) starts once per write without a checkpoint, so it
must start fast: it takes the lease on the real server importing neither pyspark, pyarrow,
SQLAlchemy nor twopc's packages (their import took seconds per write on a busy machine),
and the lease is free again once it is told to end."""

from __future__ import annotations

import subprocess
import time
import uuid
from typing import Any

import pytest

from sinks import MySqlXaSink, PostgresSink
from sinks.sql import PreparedSqlSink
from twopc import Lease
from twopc._owner import _start_ticks, driver_identity

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
