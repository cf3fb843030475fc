"""The driver agent (twopc.ledger._agent): twopc's one long-lived process per Spark driver. After a
plain drop-in write (its lease) and a streaming query with ``metricsPort`` (its metrics) in
one Spark session, one twopc process runs for the driver, found through its pid file."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from twopc import sinks
from twopc._driver_identity import identity_of
from twopc.operations._metrics_server import registry_dir

from tests._paths import REPO_ROOT

REPO = REPO_ROOT


def _twopc_processes(jvm: int) -> list[str]:
    """The twopc processes ``ps`` shows for the driver JVM *jvm* (a test may look at every
    process; twopc itself never does): its agent, and the per-write lease holders, their
    spares and the metrics server of the design the agent replaces."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    mine = []
    for line in out.splitlines():
        args = line.strip()
        agent = str(REPO / "twopc" / "ledger" / "_agent.py") in args and f'"pid": {jvm},' in args
        holder = str(REPO / "sinks" / "sql" / "_lease_holder.py") in args
        metrics = "twopc.operations._metrics_server" in args and f"--watch-pid {jvm}" in args
        if agent or holder or metrics:
            mine.append(args)  # '<pid> <command line>'
    return mine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_drivers_writes_and_metrics_leave_one_twopc_process(spark: Any, postgres_url: str, pg_engine: sa.Engine,
                                                               tmp_path: Path) -> None:
    jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    before = set(_twopc_processes(jvm))  # an earlier test's: its agent may run already (it counts)
    sinks.register_all(spark)
    table = f"agent_{uuid.uuid4().hex[:10]}"
    with pg_engine.begin() as c:  # an existing table: prepared mode, where the write takes a lease
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL, payload text)")
    try:
        (spark.range(0, 10, numPartitions=2).selectExpr("id", "concat('p', id) as payload")
           .write.format("twopc-jdbc").mode("append").option("url", postgres_url).option("dbtable", table).save())
    finally:
        with pg_engine.begin() as c:
            c.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": pa.array(range(5), pa.int64())}), tmp_path / "in" / "part-0.parquet")
    port = _free_port()
    query = (spark.readStream.schema("id long").parquet(str(tmp_path / "in")).writeStream.format("twopc-file")
             .option("path", str(tmp_path / "out")).option("checkpointLocation", str(tmp_path / "ck"))
             .option("metricsPort", str(port)).trigger(availableNow=True).start())
    query.awaitTermination(600)
    running = [p for p in _twopc_processes(jvm) if p not in before or "_agent.py" in p]
    assert len(running) <= 1, "more than one twopc process for the driver:\n" + "\n".join(running)

    from twopc.ledger._agent_client import DriverAgent  # the agent's client, where it exists

    pid = DriverAgent(identity_of(jvm)).running()
    assert pid is not None, "no agent noted for the driver"
    assert [int(p.split()[0]) for p in running] == [pid], running  # the one process: the agent, serving the port too
    assert (registry_dir(port) / "server.pid").read_text() == str(pid)


def test_one_agent_serves_every_port_its_driver_asks_for(tmp_path: Path) -> None:
    """Two queries of one driver with two ``metricsPort`` values: one agent serves both, and
    both ports' folders go when its driver does."""
    from twopc import CommitLedger
    from twopc.ledger._agent_client import DriverAgent
    from twopc.operations._metrics_server import ensure_server

    ck = tmp_path / "ck"
    CommitLedger(str(ck)).bind_sink_id(None, default="job1")
    driver = subprocess.Popen(["sleep", "600"])  # stands for the driver's JVM
    try:
        ports = [_free_port(), _free_port()]
        assert all(ensure_server(port, str(ck), driver=identity_of(driver.pid)) for port in ports)
        pid = DriverAgent(identity_of(driver.pid)).running()
        assert [(registry_dir(port) / "server.pid").read_text() for port in ports] == [str(pid)] * 2
        for port in ports:
            with socket.create_connection(("127.0.0.1", port), timeout=30):
                pass
    finally:
        driver.kill()
        driver.wait()
    deadline = time.monotonic() + 60  # a bound: the agent checks every 0.2 s
    folders = [Path(tempfile.gettempdir(), f"twopc-metrics-{os.getuid()}", str(p)) for p in ports]
    while any(f.exists() for f in folders):  # (registry_dir would make them again)
        assert time.monotonic() < deadline, "the agent outlived its driver"
        time.sleep(0.1)
