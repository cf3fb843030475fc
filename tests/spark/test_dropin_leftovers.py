"""A drop-in write (no checkpointLocation) killed half-way leaves a temporary ledger folder
and staged rows; a later drop-in write proves its driver dead, cleans the folder down to its
owner record (kept a week) and, when it writes that table, deletes the staged rows at once."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from twopc import ConfigurationError, sinks
from twopc._driver_identity import driver_identity, provably_dead
from twopc.ledger._ephemeral import PREFIX, TOMBSTONE_SECONDS, sweep_dead_ledgers
from twopc.sinks._options import Duration
from twopc.sinks.sql import JdbcOptions
from twopc.spi.lease import ephemeral_writer_dead

from tests._paths import REPO_ROOT

REPO = REPO_ROOT


def _leftovers(jvm_pid: int) -> list[Path]:
    out = []
    for folder in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            owner = json.loads((folder / "owner.json").read_text())
        except (OSError, ValueError):
            continue
        if owner.get("pid") == jvm_pid:
            out.append(folder)
    return out


def _staged(engine: sa.Engine, sink_id: str) -> int:
    with engine.connect() as conn:
        tables = [r[0] for r in conn.execute(sa.text(
            "SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'twopc_stage_%'"))]
        return sum(int(conn.execute(sa.text(f'SELECT count(*) FROM "{t}" WHERE twopc_txn LIKE :p'),
                                    {"p": f"twopc:{sink_id}:%"}).scalar_one()) for t in tables)


def test_a_killed_drop_in_write_is_cleaned_up_by_the_next_one(spark, postgres_url, pg_engine, tmp_path) -> None:
    table = f"dropin_{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "TWOPC_DROPIN_URL": postgres_url, "TWOPC_FAULTS": "before_decision:crash",
           "TWOPC_FAULT_STATE": str(tmp_path / "faults"), "PYTHONPATH": str(REPO)}
    job = subprocess.run([sys.executable, "-m", "tests._dropin_job", table], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=600, start_new_session=True)
    jvm = [int(line.split()[1]) for line in job.stdout.splitlines() if line.startswith("jvm ")]
    assert job.returncode != 0 and jvm, f"the job was not killed half-way:\n{job.stdout}\n{job.stderr[-3000:]}"
    [folder] = _leftovers(jvm[0])  # killed before its commit: the temporary ledger is left behind
    owner = json.loads((folder / "owner.json").read_text())
    deadline = time.monotonic() + 60  # SIGKILL is asynchronous: the JVM may still be tearing down
    while not provably_dead(owner) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert provably_dead(owner), f"the killed job's JVM {owner['pid']} still runs"
    sink_id = json.loads((folder / "twopc" / "sink.json").read_text())["sink_id"]
    assert sink_id.startswith("eph-") and _staged(pg_engine, sink_id) == 30  # its staged rows wait

    sinks.register_all(spark)

    def write(to: str) -> None:
        (spark.range(100, 110, numPartitions=2).selectExpr("id", "concat('p', id) as payload")
           .write.format("twopc-jdbc").mode("append").option("url", postgres_url).option("dbtable", to).save())

    write(f"{table}_other")  # a write to another table comes first and sweeps the dead driver's ledger
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == ["owner.json", "twopc",
                                                                            "twopc/sink.json"]
    assert _staged(pg_engine, sink_id) == 30  # not its table: the owner record stays to prove the driver dead
    write(table)
    assert _staged(pg_engine, sink_id) == 0  # its staged rows go at once, long before stagingRetention
    with pg_engine.connect() as conn:
        ids = sorted(r[0] for r in conn.execute(sa.text(f'SELECT id FROM "{table}"')))
    assert ids == list(range(100, 110))  # the killed write committed nothing


def test_staging_retention_is_an_option(postgres_url) -> None:
    o = JdbcOptions.parse({"url": postgres_url, "dbtable": "t", "stagingRetention": "90min"})
    assert o.staging_retention == Duration(90 * 60_000)
    assert JdbcOptions.parse({"url": postgres_url, "dbtable": "t"}).staging_retention == Duration(86_400_000)
    with pytest.raises(ConfigurationError, match="stagingRetention must be a duration"):
        JdbcOptions.parse({"url": postgres_url, "dbtable": "t", "stagingRetention": "soon"})


def _gone_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid  # a process id that no longer runs


def _ledger_folder(parent: Path, name: str, owner: dict[str, object]) -> Path:
    """A temporary ledger folder as a drop-in write of driver *owner* leaves it, with a decision."""
    f = parent / (PREFIX + name)
    (f / "twopc" / "decisions").mkdir(parents=True)
    (f / "owner.json").write_text(json.dumps({"format": 1, **owner}))
    (f / "twopc" / "sink.json").write_text(json.dumps({"sink_id": f"eph-{name}"}))
    (f / "twopc" / "decisions" / "0.json").write_text("{}")
    return f


def test_the_sweep_keeps_a_dead_writes_owner_record_for_a_week_and_leaves_live_ones(tmp_path) -> None:
    gone = _gone_pid()
    dead = _ledger_folder(tmp_path, "0000000100000001", {"host": socket.gethostname(), "pid": gone, "started": 1})
    live = _ledger_folder(tmp_path, "0000000100000002", dict(driver_identity()))  # this process
    live_files = sorted(live.rglob("*"))
    assert sweep_dead_ledgers(str(tmp_path)) == [str(dead)]
    assert sorted(str(p.relative_to(dead)) for p in dead.rglob("*")) == ["owner.json", "twopc", "twopc/sink.json"]
    assert ephemeral_writer_dead("eph-0000000100000001", str(tmp_path))  # still provable
    assert sweep_dead_ledgers(str(tmp_path)) == []  # nothing more to do until the week is over
    assert sweep_dead_ledgers(str(tmp_path), now=time.time() + TOMBSTONE_SECONDS + 60) == [str(dead)]
    assert not dead.exists()
    assert sorted(live.rglob("*")) == live_files  # a live driver's ledger is never touched


def test_the_sweep_cleans_only_this_users_ledgers_and_says_what_it_did_at_info(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shared temp dir holds other users' ledger folders: they are theirs to clean (even
    for root). This user's dead writes' folders are cleaned with one INFO line each naming
    the write, its gone driver and what was done: a crashed write's leftovers are twopc's
    to tidy, nothing for the user to act on."""
    caplog.set_level(logging.DEBUG, logger="twopc")
    gone = _gone_pid()
    dead = _ledger_folder(tmp_path, "0000000100000003", {"host": socket.gethostname(), "pid": gone, "started": 1})
    files = sorted(dead.rglob("*"))
    real = os.getuid()
    with monkeypatch.context() as m:
        m.setattr(os, "getuid", lambda: real + 1)  # the folder is now another user's
        assert sweep_dead_ledgers(str(tmp_path)) == []
    assert sorted(dead.rglob("*")) == files
    assert sweep_dead_ledgers(str(tmp_path)) == [str(dead)]
    assert sweep_dead_ledgers(str(tmp_path), now=time.time() + TOMBSTONE_SECONDS + 60) == [str(dead)]
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("twopc")]
    assert [level for level, _ in said] == [logging.INFO, logging.INFO], said
    assert all("eph-0000000100000003" in m and f"process {gone} on this host" in m for _, m in said), said
    assert said[0][1].startswith(f"twopc: emptied {dead}") and "owner record stays until 7 days" in said[0][1]
    assert said[1][1].startswith(f"twopc: removed {dead}") and not dead.exists()


def test_the_prepared_mode_sweep_lists_prepared_transactions_only(postgres_url, pg_engine) -> None:
    """A write settled in the prepared mode whose tasks never stage does not read the
    staging table when the coordinator sweeps: a staged attempt another (staging-mode)
    write of the same sink id left there is not listed as one of its transactions."""
    import pyarrow as pa

    from twopc import TransactionContext

    table = f"sweep_{uuid.uuid4().hex[:8]}"
    with pg_engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY)')
    schema = pa.schema([("id", pa.int64())])
    staging = sinks.JdbcSink.from_options({"url": postgres_url, "dbtable": table, "commitMode": "staging"})
    staging.configure_write(schema, overwrite=False, streaming=False, checkpointed=True)
    staging.validate(schema)
    txn = staging.begin_transaction(TransactionContext("sweep", 0, 0, 1))
    staging.invoke_batch(txn, pa.RecordBatch.from_pylist([{"id": 1}], schema=schema))
    staging.pre_commit(txn)  # left staged: its write died before the decision
    staging.close()
    prepared = sinks.JdbcSink.from_options({"url": postgres_url, "dbtable": table, "commitMode": "prepared"})
    prepared.configure_write(schema, overwrite=False, streaming=False, checkpointed=True)
    prepared.validate(schema)
    try:
        assert prepared.mode == "prepared" and not prepared.may_stage
        assert prepared.list_prepared("sweep") == []
        assert _staged(pg_engine, "sweep") == 1  # still there for a staging-mode write to sweep
    finally:
        prepared.close()
    reopened = sinks.JdbcSink.from_options({"url": postgres_url, "dbtable": table})  # recovery: mode unsettled
    assert [(h.batch_id, h.partition_id, h.attempt_id) for h in reopened.list_prepared("sweep")] == [(0, 0, 1)]
    reopened.close()
