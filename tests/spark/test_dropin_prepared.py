"""The drop-in (``twopc-jdbc``) without a checkpoint in prepared mode: its decision kept in the
target's ``twopc_ledger`` table, its driver's lease on the server, and what the next write or
``twopc recover`` does with the writes of dead drivers, while other writers run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pyarrow as pa
import pytest
import sqlalchemy as sa

from twopc import CommitCoordinator, FencedError, recovery, sinks
from twopc._target import open_target_ledger
from twopc.sinks import PostgresSink
from twopc.spi.lease import TargetLedger, ephemeral_sink_id

from tests._paths import REPO_ROOT
from tests._sql_helpers import leased_writer, logged_markers, validated

REPO = REPO_ROOT
#: driver-side windows whose decision is recorded before the kill: the batch must land once
DECIDED = ("after_decision", "between_commits", "after_mark")
WINDOWS = ("during_invoke", "after_pre_commit", "before_decision", *DECIDED)


@pytest.fixture(scope="module", autouse=True)
def _registered(spark) -> None:
    sinks.register_all(spark)


def _table(engine: sa.Engine) -> str:
    table = f"dp_{uuid.uuid4().hex[:10]}"
    with engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL, payload text)")
    return table


def _write(spark, url: str, table: str, lo: int, n: int = 30, **options: str) -> None:
    (spark.range(lo, lo + n, numPartitions=3).selectExpr("id", "concat('p', id) as payload")
       .write.format("twopc-jdbc").mode("append").option("url", url).option("dbtable", table).options(**options)
       .save())


def _ids(engine: sa.Engine, table: str) -> list[int]:
    with engine.connect() as c:
        return sorted(r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table}"))


def _left(engine: sa.Engine) -> tuple[list[str], list[str]]:
    """(prepared transactions, writers in the target ledger) of writes without a checkpoint and
    without txnAppId: only theirs, because a ``txnAppId`` writer's records stay in
    ``twopc_ledger`` on purpose (its last committed ``txnVersion`` makes a rerun write nothing),
    and other modules' writes (tests/spark/test_spark_jdbc.py) share this server."""
    with engine.connect() as c:
        prepared = [r[0] for r in c.exec_driver_sql("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'twopc:eph-%%'")]
        writers = [r[0] for r in c.exec_driver_sql(
            "SELECT DISTINCT sink_id FROM twopc_ledger WHERE sink_id LIKE 'eph-%%'")]
    return prepared, writers


def _free(backend: TargetLedger, writer: str) -> bool:
    with backend.take(writer) as free:
        return free


def _markers(engine: sa.Engine, log: str) -> int:
    """Marker rows prepared transactions wrote (:func:`logged_markers`; the writes purge their own)."""
    with engine.connect() as c:
        return int(c.exec_driver_sql(f"SELECT count(*) FROM {log} WHERE sink_id LIKE 'eph-%%'").scalar_one())


def test_a_live_writer_is_left_alone_a_zombie_cannot_decide_and_recover_resolves_it(
        spark, postgres_url, pg_engine, capsys) -> None:
    table = _table(pg_engine)
    log = logged_markers(pg_engine, f"mk_{table}")
    _write(spark, postgres_url, table, 0, 10, markerTable=f"mk_{table}")
    assert _markers(pg_engine, log) == 3  # prepared mode (a marker per prepared transaction), no checkpoint
    assert _left(pg_engine) == ([], [])  # and nothing left behind

    # a writer that is alive (holds its lease) with a prepared transaction, as a task leaves it;
    # validated as a write's plan leaves it (its marker table created)
    sink = validated(PostgresSink, postgres_url, table, pa.schema([("id", pa.int64()), ("payload", pa.string())]))
    backend = sink.target_ledger()
    sink_id = ephemeral_sink_id()
    lease, epoch, handle = leased_writer(sink, backend, sink_id, 0, {"id": 500, "payload": "live"})

    _write(spark, postgres_url, table, 100, 10)  # another writer meanwhile: it must not touch the live one
    assert _left(pg_engine) == ([handle.txn_id], [sink_id])

    backend.release(lease)  # its lease connection dies: from now on it is a zombie
    deadline = time.monotonic() + 30
    while backend.holds(lease) and time.monotonic() < deadline:
        time.sleep(0.1)
    zombie = CommitCoordinator(sink, open_target_ledger(backend, sink_id, lease=lease, epoch=epoch), sink_id)
    with pytest.raises(FencedError, match="lost its lease"):
        zombie.commit_batch(0, [handle])
    assert _left(pg_engine) == ([handle.txn_id], [sink_id])  # it committed nothing

    target = ["--format", "twopc-jdbc", "--option", f"url={postgres_url}", "--option", f"dbtable={table}"]
    assert recovery.main(["status", *target]) == 1  # the operator sees the dead writer's transaction
    shown = capsys.readouterr().out
    assert handle.txn_id in shown and "orphan" in shown and "writer: gone" in shown
    assert recovery.main(["recover", *target]) == 0
    assert _left(pg_engine) == ([], [])  # the orphan is rolled back, the writer's records are gone
    assert recovery.main(["status", *target]) == 0
    assert _ids(pg_engine, table) == [*range(10), *range(100, 110)]
    sink.close()


def test_writers_killed_at_every_window_beside_a_live_one(spark, postgres_url, pg_engine, tmp_path) -> None:
    table = _table(pg_engine)
    jobs = []
    for i, window in enumerate(WINDOWS):
        env = {**os.environ, "TWOPC_DROPIN_URL": postgres_url, "TWOPC_FAULTS": f"{window}:crash",
               "TWOPC_FAULT_STATE": str(tmp_path / window), "PYTHONPATH": str(REPO)}
        jobs.append(subprocess.Popen([sys.executable, "-m", "tests._dropin_job", table, str(1000 * (i + 1))],
                                     env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True))
    _write(spark, postgres_url, table, 0)  # a live writer beside them (it resolves only the dead)
    for job, window in zip(jobs, WINDOWS, strict=True):
        _out, err = job.communicate(timeout=900)
        assert job.returncode != 0, f"the job to be killed at {window} finished:\n{err[-3000:]}"

    # SIGKILL is asynchronous: a killed driver's agent notices its JVM is gone within 0.2 s
    probe = PostgresSink(postgres_url, table)
    backend = probe.target_ledger()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(_free(backend, w) for w in backend.writers()):
        time.sleep(0.2)
    probe.close()
    _write(spark, postgres_url, table, 100)  # the next write resolves every dead writer
    expected = [*range(30), *range(100, 130)]
    for i, window in enumerate(WINDOWS):
        if window in DECIDED:
            expected += range(1000 * (i + 1), 1000 * (i + 1) + 30)
    assert _ids(pg_engine, table) == sorted(expected)  # each id once; a batch killed before its decision: none
    assert _left(pg_engine) == ([], [])
