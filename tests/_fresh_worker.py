"""A sink's work in a fresh interpreter, as a new Spark Python worker does it, and which heavy
modules (pyarrow, pandas) that interpreter loaded:

- :func:`task_in_fresh_worker`: a write task (validate, write, prepare, commit) of a sink
  built by a given expression, its rows read from Arrow IPC as a Spark worker gets them (a
  batch built from Python lists would import pandas in the test itself);
- :func:`commit_in_fresh_worker`: the worker that commits a ``twopc-jdbc`` write. Spark commits
  a Python data source write in a worker of its own, which unpickles the planned writer and
  the tasks' messages: the write is planned and its two tasks run without a JVM (as the
  drop-in tests do), then the commit runs in a new interpreter."""

from __future__ import annotations

import contextlib
import json
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import sqlalchemy as sa

from tests._paths import REPO_ROOT
from tests._sql_helpers import uid

TASK = """
import json, sys
import pyarrow as pa
from twopc import Participant, TransactionContext
from twopc.sinks import FileSink, PostgresSink
from twopc.spi.runtime import CompositeSink

url, table, out, path = sys.argv[1:5]
with pa.ipc.open_stream(pa.OSFile(path)) as reader:
    batches = list(reader)
sink = SINK
sink.validate(batches[0].schema)
txn = sink.begin_transaction(TransactionContext("imports", 7, 0, 1, 0))
for b in batches:
    sink.invoke_batch(txn, b)
sink.commit(sink.pre_commit(txn))
sink.close()
print(json.dumps({m: m in sys.modules for m in ("pyarrow", "pandas")}))
"""

COMMIT = """
import json, pickle, sys
with open(sys.argv[1], "rb") as fh:
    writer, messages = pickle.load(fh)
writer.commit(messages)
print(json.dumps({m: m in sys.modules for m in ("pyarrow", "pandas")}))
"""


def task_in_fresh_worker(sink: str, url: str, table: str, rows: pa.RecordBatch, tmp_path: Path) -> dict[str, bool]:
    """Run a write task of *rows* (batch 7) through the sink that the Python expression *sink*
    builds (names in scope: ``url``, ``table``, ``out`` (a folder under *tmp_path*),
    ``PostgresSink``, ``FileSink``, ``Participant``, ``CompositeSink``) in a fresh interpreter;
    return ``{"pyarrow": loaded, "pandas": loaded}`` of that interpreter."""
    path = tmp_path / "rows.arrows"
    with pa.ipc.new_stream(str(path), rows.schema) as writer:
        writer.write_batch(rows)
    proc = subprocess.run([sys.executable, "-c", TASK.replace("SINK", sink), url, table, str(tmp_path / "out"),
                           str(path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    loaded: dict[str, bool] = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded


@contextlib.contextmanager
def _planned_jdbc_write(url: str, engine: sa.Engine, prefix: str) -> Iterator[tuple[Any, str]]:
    """A prepared ``twopc-jdbc`` write to a new table (``<prefix>_<uid>``, dropped after),
    planned on the driver without a JVM: ``(writer, table)``."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from twopc.sinks import JdbcDataSource, JdbcSink

    table = f"{prefix}_{uid()}"
    with engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL, payload text)")
    schema = StructType([StructField("id", LongType(), False), StructField("payload", StringType())])
    try:
        writer = JdbcDataSource({"url": url, "dbtable": table}).writer(schema, False)
        assert isinstance(writer.sink, JdbcSink) and writer.sink.mode == "prepared"
        yield writer, table
    finally:
        with engine.begin() as c:
            c.exec_driver_sql(f"DROP TABLE {table}")


def commit_in_fresh_worker(url: str, engine: sa.Engine, tmp_path: Path) -> dict[str, bool]:
    """Plan a prepared ``twopc-jdbc`` write of two tasks to a new table at *url*, commit it in
    a fresh interpreter and return ``{"pyarrow": loaded, "pandas": loaded}`` of that
    interpreter; the committed rows are checked."""
    with _planned_jdbc_write(url, engine, "commit_imports") as (writer, table):
        messages = []
        for p in range(2):
            ids = [p * 10 + i for i in range(3)]
            rows = pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64()),
                                               "payload": pa.array([str(i) for i in ids], pa.string())})
            messages.append(writer.write_partition(iter([rows]), 0, p, p))
        path = tmp_path / "commit.pickle"
        path.write_bytes(pickle.dumps((writer, messages)))
        proc = subprocess.run([sys.executable, "-c", COMMIT, str(path)], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        with engine.connect() as c:
            assert sorted(r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table}")) == [0, 1, 2, 10, 11, 12]
        loaded: dict[str, bool] = json.loads(proc.stdout.strip().splitlines()[-1])
        return loaded


_WRITE = """
import json, pickle, sys
import pyarrow as pa
with open(sys.argv[1], "rb") as fh:
    writer = pickle.load(fh)
with pa.ipc.open_stream(pa.OSFile(sys.argv[2])) as reader:
    batches = list(reader)
message = writer.write_partition(iter(batches), 0, 0, 0)
with open(sys.argv[3], "wb") as fh:
    pickle.dump([message], fh)
print(json.dumps(sorted(m for m in sys.modules if m == "twopc" or m.startswith("twopc."))))
"""

_COMMIT_MESSAGES = """
import json, pickle, sys
with open(sys.argv[1], "rb") as fh:
    writer = pickle.load(fh)
with open(sys.argv[3], "rb") as fh:
    messages = pickle.load(fh)
writer.commit(messages)
print(json.dumps(sorted(m for m in sys.modules if m == "twopc" or m.startswith("twopc."))))
"""


def jdbc_modules_in_fresh_workers(url: str, engine: sa.Engine, tmp_path: Path) -> dict[str, list[str]]:
    """Plan a prepared ``twopc-jdbc`` write to a new table at *url*, run its one task in a
    fresh interpreter (as Spark's Python worker runs a task: the pickled writer, rows as Arrow
    IPC), then commit it in another (as Spark's commit worker does); return the ``twopc``
    modules each interpreter held at the end, ``{"task": [...], "commit": [...]}``. The
    committed rows are checked."""
    with _planned_jdbc_write(url, engine, "worker_modules") as (writer, table):
        rows = pa.RecordBatch.from_pydict({"id": pa.array([1, 2], pa.int64()), "payload": pa.array(["a", "b"])})
        paths = [tmp_path / "writer.pickle", tmp_path / "rows.arrows", tmp_path / "messages.pickle"]
        paths[0].write_bytes(pickle.dumps(writer))
        with pa.ipc.new_stream(str(paths[1]), rows.schema) as out:
            out.write_batch(rows)
        held = {}
        for name, code in (("task", _WRITE), ("commit", _COMMIT_MESSAGES)):
            proc = subprocess.run([sys.executable, "-c", code, *map(str, paths)], cwd=REPO_ROOT,
                                  capture_output=True, text=True, timeout=120, check=False)
            assert proc.returncode == 0, proc.stderr
            held[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        with engine.connect() as c:
            assert sorted(r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table}")) == [1, 2]
        return held
