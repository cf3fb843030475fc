"""A drop-in write (no checkpointLocation) killed half-way leaves a temporary ledger folder
and staged rows; the next drop-in write proves its driver dead and deletes both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

import sinks
from sinks._options import Duration
from sinks.sql import JdbcOptions
from twopc import ConfigurationError
from twopc._ephemeral import PREFIX
from twopc._owner import provably_dead

REPO = Path(__file__).resolve().parents[1]


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
    (spark.range(100, 110, numPartitions=2).selectExpr("id", "concat('p', id) as payload")
       .write.format("twopc-jdbc").mode("append").option("url", postgres_url).option("dbtable", table).save())

    assert not folder.exists()  # the dead driver's ledger is gone
    assert _staged(pg_engine, sink_id) == 0  # and so are its staged rows, long before stagingRetention
    with pg_engine.connect() as conn:
        ids = sorted(r[0] for r in conn.execute(sa.text(f'SELECT id FROM "{table}"')))
    assert ids == list(range(100, 110))  # the killed write committed nothing


def test_staging_retention_is_an_option(postgres_url) -> None:
    o = JdbcOptions.parse({"url": postgres_url, "dbtable": "t", "stagingRetention": "90min"})
    assert o.staging_retention == Duration(90 * 60_000)
    assert JdbcOptions.parse({"url": postgres_url, "dbtable": "t"}).staging_retention == Duration(86_400_000)
    with pytest.raises(ConfigurationError, match="stagingRetention must be a duration"):
        JdbcOptions.parse({"url": postgres_url, "dbtable": "t", "stagingRetention": "soon"})
