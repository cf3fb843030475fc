"""What a composite write task costs a fresh Spark Python worker in imports: a composite of
PostgreSQL and files whose participants add the micro-batch id column (``batch_column``)
validates, writes, prepares and commits without importing pandas (about 0.4 s of CPU, once
per worker). The rows reach the task through Arrow IPC, as a Spark worker gets them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import sqlalchemy as sa

from tests._filesink_helpers import committed_ids
from tests._paths import REPO_ROOT
from tests._sql_helpers import uid

TASK = """
import json, sys
import pyarrow as pa
from twopc import Participant, TransactionContext
from twopc.sinks import FileSink, PostgresSink
from twopc.spi import CompositeSink

url, table, out, path = sys.argv[1:5]
with pa.ipc.open_stream(pa.OSFile(path)) as reader:
    batches = list(reader)
sink = CompositeSink([Participant("db", PostgresSink(url, table), batch_column="batch"),
                      Participant("files", FileSink(out), columns=["id"], batch_column="batch")])
sink.validate(batches[0].schema)
txn = sink.begin_transaction(TransactionContext("imports", 7, 0, 1, 0))
for b in batches:
    sink.invoke_batch(txn, b)
sink.commit(sink.pre_commit(txn))
sink.close()
print(json.dumps({"pandas": "pandas" in sys.modules}))
"""


def test_a_composite_task_with_a_batch_column_does_not_import_pandas(
        postgres_url: str, pg_engine: sa.Engine, tmp_path: Path) -> None:
    table = f"composite_imports_{uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint, payload text, batch bigint NOT NULL)")
    rows = pa.record_batch({"id": pa.array([1, 2, 3], pa.int64()), "payload": pa.array(["a", None, "c"])})
    path = tmp_path / "rows.arrows"
    with pa.ipc.new_stream(str(path), rows.schema) as writer:
        writer.write_batch(rows)
    try:
        proc = subprocess.run([sys.executable, "-c", TASK, postgres_url, table, str(tmp_path / "out"), str(path)],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"pandas": False}
        with pg_engine.connect() as c:
            assert sorted(c.exec_driver_sql(f"SELECT id, batch FROM {table}").all()) == [(1, 7), (2, 7), (3, 7)]
        assert sorted(committed_ids(tmp_path / "out")) == [1, 2, 3]
    finally:
        with pg_engine.begin() as c:
            c.exec_driver_sql(f"DROP TABLE {table}")
