"""The worker that commits a ``twopc-jdbc`` write, in a fresh interpreter: Spark commits a
Python data source write in a worker of its own, which unpickles the planned writer and the
tasks' messages. :func:`commit_in_fresh_worker` plans a prepared write of two tasks without
a JVM (as the drop-in tests do), commits it in a new interpreter and reports which heavy
modules that interpreter loaded."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import sqlalchemy as sa

from tests._paths import REPO_ROOT
from tests._sql_helpers import uid

COMMIT = """
import json, pickle, sys
with open(sys.argv[1], "rb") as fh:
    writer, messages = pickle.load(fh)
writer.commit(messages)
print(json.dumps({m: m in sys.modules for m in ("pyarrow", "pandas")}))
"""


def commit_in_fresh_worker(url: str, engine: sa.Engine, tmp_path: Path) -> dict[str, bool]:
    """Plan a prepared ``twopc-jdbc`` write of two tasks to a new table at *url*, commit it in
    a fresh interpreter and return ``{"pyarrow": loaded, "pandas": loaded}`` of that
    interpreter; the committed rows are checked."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from twopc.sinks import JdbcDataSource, JdbcSink

    table = f"commit_imports_{uid()}"
    with engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL, payload text)")
    schema = StructType([StructField("id", LongType(), False), StructField("payload", StringType())])
    try:
        writer = JdbcDataSource({"url": url, "dbtable": table}).writer(schema, False)
        assert isinstance(writer.core.sink, JdbcSink) and writer.core.sink.mode == "prepared"
        messages = []
        for p in range(2):
            ids = [p * 10 + i for i in range(3)]
            rows = pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64()),
                                               "payload": pa.array([str(i) for i in ids], pa.string())})
            messages.append(writer.core.write_partition(iter([rows]), 0, p, p))
        path = tmp_path / "commit.pickle"
        path.write_bytes(pickle.dumps((writer, messages)))
        proc = subprocess.run([sys.executable, "-c", COMMIT, str(path)], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        with engine.connect() as c:
            assert sorted(r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table}")) == [0, 1, 2, 10, 11, 12]
        loaded: dict[str, bool] = json.loads(proc.stdout.strip().splitlines()[-1])
        return loaded
    finally:
        with engine.begin() as c:
            c.exec_driver_sql(f"DROP TABLE {table}")
