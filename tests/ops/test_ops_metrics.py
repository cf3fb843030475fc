"""Metrics and logs of a real running query, read where an operator reads them: the
Prometheus endpoint that ``metricsPort`` starts (scraped while the query runs), and the
driver's console (the application's stderr, where Spark copies its Python workers' stderr).
Plus the pieces in-process: the collector registered into an application's own registry,
and the JSON log format."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from twopc import CommitCoordinator, CommitLedger, TransactionContext, register_metrics
from twopc._driver_identity import identity_of
from twopc._logs import JsonFormatter, log_event
from twopc.ledger._agent_client import DriverAgent
from twopc.operations._metrics import record_batch
from twopc.sinks import FileSink, PostgresSink

from tests._filesink_helpers import crash_commit, run_task
from tests._ops_helpers import REPO, cli_env

BATCHES = 3
ROWS = 10


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("sink_id", "format")))
            out[(s.name, labels)] = s.value
    return out


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_running_querys_endpoint_counts_its_batches_and_its_console_shows_each_batch(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    for b in range(BATCHES):
        table = pa.table({"id": pa.array(range(b * ROWS, (b + 1) * ROWS), pa.int64())})
        pq.write_table(table, tmp_path / "in" / f"part-{b}.parquet")
        os.utime(tmp_path / "in" / f"part-{b}.parquet", (time.time() - BATCHES + b,) * 2)
    port = _free_port()
    spec = {"input": str(tmp_path / "in"), "checkpoint": str(tmp_path / "ck"),
            "options": {"path": str(tmp_path / "out"), "metricsPort": str(port), "metricsHost": "127.0.0.1"}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    stderr_path = tmp_path / "console.txt"
    with open(stderr_path, "wb") as console_file:
        proc = subprocess.Popen([sys.executable, "-m", "tests._ops_query", str(tmp_path / "spec.json")], cwd=REPO,
                                env=cli_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=console_file,
                                text=True)
        try:
            assert proc.stdout is not None and proc.stdin is not None
            ready = proc.stdout.readline()
            assert ready.strip() == f"READY {BATCHES}", (ready, stderr_path.read_text()[-3000:])
            scraped = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
            proc.stdin.close()
            assert proc.wait(timeout=120) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    m = _samples(scraped)
    assert m[("twopc_batches_total", (("action", "committed"),))] == BATCHES, scraped
    assert m[("twopc_in_doubt_transactions", ())] == 0 and m[("twopc_oldest_in_doubt_seconds", ())] == 0
    assert m[("twopc_commits_total", (("outcome", "committed"),))] == len(FileSink(str(tmp_path / "out"))
                                                                          .committed_files())
    assert m[("twopc_commit_seconds_count", ())] == BATCHES
    assert m[("twopc_prepare_to_commit_seconds_count", ())] == BATCHES
    assert m[("twopc_batch_rows_sum", ())] == BATCHES * ROWS
    console = stderr_path.read_text()
    summary = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO twopc\.coordinator: twopc: sink=\S+ "
                         r"batch=(\d+) action=committed committed=\d+ ", re.M)
    assert sorted(int(b) for b in summary.findall(console)) == list(range(BATCHES)), console[-3000:]
    assert re.search(r"^\S+ \S+ INFO twopc\.spark: twopc: sink \S+ commits through FileSink", console, re.M)
    deadline = time.monotonic() + 30  # the server ends with the Spark driver's JVM
    while _port_open(port):
        assert time.monotonic() < deadline, "the metrics server outlived the query's JVM"
        time.sleep(0.2)


def test_the_collector_joins_an_applications_registry_and_reads_the_ledger_at_scrape(tmp_path: Path) -> None:
    """The hook: register into the application's registry; the in-doubt gauge comes from the
    ledger, so a driver killed after its decision shows at the next scrape."""
    sink = FileSink(str(tmp_path / "out"))
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_sink_id(None, default="job1")
    record_batch(ledger, sink_id="job1", format_name="twopc-file", action="committed", committed=2,
                 already_committed=0, aborted=0, swept=1, seconds=0.02, rows=7, first_prepared_at=time.time() - 1,
                 retried=1)
    registry = CollectorRegistry()
    register_metrics(registry, str(tmp_path / "ck"))
    m = _samples(generate_latest(registry).decode())
    assert m[("twopc_batches_total", (("action", "committed"),))] == 1
    assert m[("twopc_orphans_swept_total", ())] == 1 and m[("twopc_batch_rows_sum", ())] == 7
    assert m[("twopc_in_doubt_transactions", ())] == 0
    assert m[("twopc_commits_total", (("outcome", "lost"),))] == 0  # a series to alert on before the first loss
    assert m[("twopc_commits_total", (("outcome", "retried"),))] == 1
    assert m[("twopc_recovery_runs_total", ())] == 0
    handles = [run_task(sink, "job1", 1, p, p, [p]) for p in range(2)]
    crash_commit(CommitCoordinator(sink, ledger, "job1"), "after_decision", 1, handles, tmp_path / "f")
    m = _samples(generate_latest(registry).decode())
    assert m[("twopc_in_doubt_transactions", ())] == 2 and m[("twopc_oldest_in_doubt_seconds", ())] >= 0
    assert 'sink_id="job1"' in generate_latest(registry).decode()


def test_json_log_records_carry_the_events_fields(caplog: pytest.LogCaptureFixture) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("twopc.test_ops")
    logger.addHandler(handler)
    try:
        log_event(logger, logging.WARNING, "orphan_rolled_back", "twopc: rolled back %s", "t1",
                  sink_id="s", batch=3, txn_id="t1")
    finally:
        logger.removeHandler(handler)
    record = json.loads(stream.getvalue())
    assert record["event"] == "orphan_rolled_back" and record["level"] == "WARNING"
    assert (record["sink_id"], record["batch"], record["txn_id"]) == ("s", 3, "t1")
    assert record["message"] == "twopc: rolled back t1" and record["time"].endswith("+00:00")


def test_a_commit_that_finds_a_transaction_lost_counts_a_failure_and_the_loss(tmp_path: Path) -> None:
    """The driver's commit path (what Spark calls) counts what raised: a decided transaction
    someone rolled back by hand is lost; the commit raises and the metrics say so."""
    from twopc import TransactionLostError
    from twopc.spark._writer import WriterCore
    from twopc.spi.runtime import RuntimeOptions, TwoPCCommitMessage, dumps_handle

    sink = FileSink(str(tmp_path / "out"))
    ck = str(tmp_path / "ck")
    CommitLedger(ck).bind_sink_id(None, default="job1")
    handles = [run_task(sink, "job1", 0, p, p, [p]) for p in range(2)]
    sink.abort(handles[0])  # an operator's ROLLBACK PREPARED, in file-sink terms
    core = WriterCore(sink, "job1", RuntimeOptions.parse({"checkpointLocation": ck}, streaming=True), skip=False,
                       format_name="twopc-file")
    messages = [TwoPCCommitMessage(dumps_handle(h), 1, h.partition_id, h.attempt_id, time.time()) for h in handles]
    with pytest.raises(TransactionLostError):
        core.commit(messages, 0)
    registry = CollectorRegistry()
    register_metrics(registry, ck)
    m = _samples(generate_latest(registry).decode())
    assert m[("twopc_failures_total", (("stage", "commit"),))] == 1
    assert m[("twopc_commits_total", (("outcome", "lost"),))] == 1
    assert m[("twopc_in_doubt_transactions", ())] == 2 and m[("twopc_batches_total", (("action", "committed"),))] == 0


@pytest.fixture
def pg_batch_in_doubt(postgres_url: str, pg_engine: sa.Engine, tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A checkpoint whose batch 0 is decided but not committed (its driver died after the
    decision), its two PostgreSQL transactions still prepared. Yields (checkpoint, 2)."""
    table = f"om_{uuid.uuid4().hex[:10]}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL)")
    sink = PostgresSink(postgres_url, table)
    sink.validate(pa.schema([("id", pa.int64())]))  # creates the marker table
    ledger = CommitLedger(str(tmp_path / "ck"))
    sid = ledger.bind_sink_id(None, default=f"om{uuid.uuid4().hex[:8]}")
    handles = []
    try:
        for p in range(2):
            txn = sink.begin_transaction(TransactionContext(sid, 0, p, p))
            sink.invoke_batch(txn, pa.RecordBatch.from_pydict({"id": pa.array([p], pa.int64())}))
            handles.append(sink.pre_commit(txn))
        crash_commit(CommitCoordinator(sink, ledger, sid), "after_decision", 0, handles, tmp_path / "f")
        assert len(sink.list_prepared(sid)) == 2
        yield tmp_path / "ck", 2
    finally:
        for h in handles:
            sink.abort(h)
        sink.close()
        with pg_engine.begin() as c:
            c.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")


def _scrape(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_driver_agent_serves_a_postgres_batch_in_doubt_without_having_imported_the_sinks(
        pg_batch_in_doubt: tuple[Path, int], tmp_path: Path) -> None:
    """The driver agent that serves ``metricsPort`` imports twopc only: decoding the
    decision's ``twopc.postgres`` handles must not depend on it having imported ``twopc.sinks``."""
    ck, in_doubt = pg_batch_in_doubt
    folder = tmp_path / "registry"
    folder.mkdir()
    (folder / "q.ckpt").write_text(str(ck), encoding="utf-8")
    port = _free_port()
    driver = subprocess.Popen(["sleep", "600"])  # stands for the driver's JVM
    agent = DriverAgent(identity_of(driver.pid))
    server = subprocess.Popen(agent.argv(), cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while agent.running() is None:
            assert server.poll() is None and time.monotonic() < deadline, server.communicate()[0]
            time.sleep(0.1)
        assert agent.request({"op": "serve", "port": port, "host": "127.0.0.1", "registry": str(folder)},
                             60)[1] == ["serving"]
        status, body = _scrape(f"http://127.0.0.1:{port}/metrics")
    finally:
        driver.kill()
        driver.wait()
        assert server.wait(timeout=60) == 0, server.communicate()[0]
    assert status == 200, body[-2000:]
    m = _samples(body)
    assert m[("twopc_in_doubt_transactions", ())] == in_doubt and m[("twopc_oldest_in_doubt_seconds", ())] >= 0


def test_the_readmes_register_metrics_reads_a_postgres_batch_in_doubt_in_a_fresh_process(
        pg_batch_in_doubt: tuple[Path, int], tmp_path: Path) -> None:
    """The README's snippet, run by an application that never imported ``twopc.sinks``."""
    ck, in_doubt = pg_batch_in_doubt
    script = ("import sys\n"
              "from prometheus_client import REGISTRY, generate_latest\n"
              "from twopc import register_metrics\n"
              "print('sinks imported:', 'twopc.sinks' in sys.modules, file=sys.stderr)\n"
              f"register_metrics(REGISTRY, {str(ck)!r})\n"
              "sys.stdout.write(generate_latest(REGISTRY).decode())\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=cli_env(), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sinks imported: False" in out.stderr, out.stderr[-3000:]
    m = _samples(out.stdout)
    assert m[("twopc_in_doubt_transactions", ())] == in_doubt


def _connects(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2.0)
        return s.connect_ex((host, port)) == 0


def test_the_metrics_server_listens_on_loopback_unless_a_host_is_named(tmp_path: Path) -> None:
    """``metricsPort`` alone serves on 127.0.0.1 only: 127.0.0.2, another address of this
    machine, is refused (a server on all interfaces would answer it); ``metricsHost`` names
    the interface."""
    from twopc.operations._metrics_server import ensure_server, metrics_port, registry_dir

    ck = tmp_path / "ck"
    CommitLedger(str(ck)).bind_sink_id(None, default="job1")
    for options, reachable in (({"metricsPort": str(_free_port())}, {"127.0.0.1": True, "127.0.0.2": False}),
                               ({"metricsPort": str(_free_port()), "metricsHost": "0.0.0.0"},
                                {"127.0.0.1": True, "127.0.0.2": True})):
        served = metrics_port(options)
        assert served is not None
        port, host = served
        pidfile = registry_dir(port) / "server.pid"
        assert ensure_server(port, str(ck), host=host)
        try:
            deadline = time.monotonic() + 60
            while not pidfile.exists() or not _port_open(port):
                assert time.monotonic() < deadline, "the port is not served"
                time.sleep(0.1)
            assert {h: _connects(h, port) for h in reachable} == reachable, options
        finally:
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
            shutil.rmtree(registry_dir(port), ignore_errors=True)
