"""twopc under Spark Connect: a client with no JVM, a real Connect server
(:class:`twopc.faultinject.LocalSparkConnect`) whose Python workers run the data sources, and
PostgreSQL, Redis, the file system and an HTTP API (the reference service) as targets.

What differs from a classic session and is checked here: formats are registered per
Connect session, the data sources run (and import twopc) on the server, the checkpoint is
the server's disk, and a server lost between the decision and the commit is recovered by
the next query on a new server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from pyspark.sql.connect.client.retries import DefaultPolicy
from sqlalchemy.engine import make_url

from twopc import sinks
from twopc.faultinject import LocalSparkConnect, read_firings
from twopc.faultinject._spark_cluster import find_spark_home

from tests._http_service import HttpService
from tests._paths import REPO_ROOT
from tests._s3 import aws_config_path

ROOT = str(REPO_ROOT)


def _server_env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "AWS_CONFIG_FILE": os.environ.get("AWS_CONFIG_FILE", aws_config_path()), **extra}


def _session(url: str) -> Any:
    """A new Spark Connect session (the client of PySpark's Connect module, whatever this
    process's classic session does)."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    return RemoteSparkSession.builder.remote(url).create()


@pytest.fixture(scope="module")
def connect_server() -> Iterator[LocalSparkConnect]:
    with LocalSparkConnect(env=_server_env()) as server:
        yield server


@pytest.fixture(scope="module")
def remote(connect_server: LocalSparkConnect) -> Iterator[Any]:
    """A Spark Connect session with the twopc formats registered."""
    session = _session(connect_server.url)
    sinks.register_all(session)
    try:
        yield session
    finally:
        session.stop()


def _jdbc(sa_url: str) -> dict[str, str]:
    u = make_url(sa_url)
    return {"url": f"jdbc:postgresql://{u.host}:{u.port}/{u.database}", "user": u.username or "",
            "password": u.password or "", "driver": "org.postgresql.Driver"}


def _ids(engine: sa.Engine, table: str) -> list[int]:
    with engine.connect() as c:
        return [r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table} ORDER BY id")]


def _prepared(engine: sa.Engine) -> list[str]:
    with engine.connect() as c:
        return [r[0] for r in c.exec_driver_sql("SELECT gid FROM pg_prepared_xacts")]


def test_connect_session_is_remote(remote) -> None:
    """The tier really runs through a Connect client: no JVM in this process's session."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    assert isinstance(remote, RemoteSparkSession)


def test_batch_writes_through_connect_write_each_version_once(remote, pg_engine, postgres_url) -> None:
    table = f"cx_{uuid.uuid4().hex[:10]}"
    df = remote.range(0, 40, numPartitions=2).selectExpr("id", "concat('row-', id) AS payload")
    for version in ("1", "1", "2"):  # the first run creates the table, the rerun of 1 writes nothing
        (df.write.format("twopc-jdbc").mode("append").options(**_jdbc(postgres_url)).option("dbtable", table)
         .option("txnAppId", f"cx-{table}").option("txnVersion", version).save())
    assert _ids(pg_engine, table) == sorted(list(range(40)) * 2)
    plain = f"{table}_plain"  # the drop-in: Spark's JDBC options, only the format swapped
    df.write.format("twopc-jdbc").mode("append").options(**_jdbc(postgres_url)).option("dbtable", plain).save()
    assert _ids(pg_engine, plain) == list(range(40))
    assert [g for g in _prepared(pg_engine) if table in g] == []


def test_redis_stream_source_into_redis_with_ack_group(remote, redis_url, tmp_path) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    tag = uuid.uuid4().hex[:8]
    stream, group = f"{{cx{tag}}}:orders", f"spark-{tag}"
    for i in range(300):
        r.xadd(stream, {"user": f"u{i % 7}", "amount": str(i)})
    orders = (remote.readStream.format("twopc-redis-stream").option("url", redis_url).option("streams", stream)
              .option("group", group).option("startingPosition", "earliest").option("maxEntriesPerTrigger", "120")
              .option("fieldsSchema", "user STRING, amount BIGINT").load())
    spent = f'[{{"op": "HINCRBY", "key": "{{{{cx{tag}}}}}:spent", "field": "{{user}}", "by": "{{amount}}"}}]'
    q = (orders.writeStream.format("twopc-redis").option("url", redis_url).option("mapping", spent)
         .option("hashTag", f"cx{tag}").option("ackGroup", group)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    assert sum(int(v) for v in r.hgetall(f"{{cx{tag}}}:spent").values()) == sum(range(300))
    info = r.xinfo_groups(stream)[0]
    assert (info["pending"], info["lag"]) == (0, 0)


def test_composite_through_connect(remote, pg_engine, postgres_url, tmp_path) -> None:
    table = f"cx_{uuid.uuid4().hex[:10]}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint PRIMARY KEY, payload text)")
    pg = make_url(postgres_url)
    df = remote.range(0, 30, numPartitions=2).selectExpr("id", "concat('row-', id) AS payload")
    for _ in range(2):  # the same txnVersion twice: written once, in both participants
        (df.write.format("twopc-composite").mode("append").option("targets", "orders,files")
         .option("orders.format", "twopc-postgres")
         .option("orders.url", pg.set(drivername="postgresql").render_as_string(hide_password=False))
         .option("orders.dbtable", table)
         .option("files.format", "twopc-file").option("files.path", str(tmp_path / "files"))
         .option("checkpointLocation", str(tmp_path / "ck")).option("txnVersion", "1").save())
    assert _ids(pg_engine, table) == list(range(30))
    import pyarrow.parquet as pq

    files = sorted((tmp_path / "files").glob("*.parquet"))
    assert sorted(pq.read_table(files).column("id").to_pylist()) == list(range(30))


def test_http_through_connect_sends_each_row_once(remote, tmp_path) -> None:
    """twopc-http on a Connect server: its outboxes in the server's checkpoint, a rerun of the
    same txnVersion sends nothing, each row applied once by the reference service."""
    with HttpService() as service:
        df = remote.range(0, 24, numPartitions=3).selectExpr("id", "concat('row-', id) AS payload")
        for _ in range(2):
            (df.write.format("twopc-http").mode("append").option("url", f"{service.url}/rows/{{id}}")
             .option("keyColumn", "id").option("checkpointLocation", str(tmp_path / "ck"))
             .option("txnVersion", "1").save())
        assert sorted(service.ids()) == list(range(24)) and service.count() == 24


def test_streaming_query_whose_server_died_after_the_decision_commits_once(pg_engine, postgres_url,
                                                                          tmp_path) -> None:
    """The Connect server (the query's driver) is SIGKILLed right after batch 1's decision;
    a new server and a new session restart the query from its checkpoint: every row once,
    nothing left prepared."""
    table = f"cx_{uuid.uuid4().hex[:10]}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint, payload text)")
    inp = tmp_path / "in"
    inp.mkdir()
    for f in range(3):
        (inp / f"part-{f}.json").write_text(
            "".join(f'{{"id": {i}, "payload": "row-{i}"}}\n' for i in range(f * 10, f * 10 + 10)))
    state = tmp_path / "faults"
    server = LocalSparkConnect(env=_server_env(TWOPC_FAULTS="after_decision@batch=1:crash",
                                               TWOPC_FAULT_STATE=str(state)))
    pg_url = make_url(postgres_url).set(drivername="postgresql").render_as_string(hide_password=False)

    def run() -> None:
        session = _session(server.url)
        # the client's default retries a lost server for 10 minutes; this test knows it is gone
        session.client.set_retry_policies([DefaultPolicy(max_retries=2, max_backoff=1000)])
        try:
            sinks.register_all(session)
            q = (session.readStream.format("json").schema("id BIGINT, payload STRING").option("maxFilesPerTrigger", 1)
                 .load(str(inp)).writeStream.format("twopc-postgres").option("url", pg_url)
                 .option("dbtable", table).option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
            q.awaitTermination()
        finally:
            session.stop()

    with server:
        with pytest.raises(Exception):  # noqa: B017 - the server is gone: the client sees its connection fail
            run()
        assert server.wait_dead(), "the crash rule did not take the Connect server down"
        assert [f for f in read_firings(state) if "after_decision" in f], "the crash never fired"
        server.start()  # a new server on the same port; the rule fired once and stays spent
        run()
    assert _ids(pg_engine, table) == list(range(30))
    assert [g for g in _prepared(pg_engine) if "twopc" in g] == []


_PIPELINE_SPEC = """\
name: orders
storage: {storage}
libraries:
  - glob:
      include: transformations/**
"""

_PIPELINE_FLOW = '''\
import os

from pyspark import pipelines as dp
from pyspark.sql import SparkSession

from twopc import sinks

spark = SparkSession.active()
sinks.register_all(spark)
dp.create_sink("orders_pg", format="twopc-postgres",
               options={"url": os.environ["ORDERS_URL"], "dbtable": os.environ["ORDERS_TABLE"]})


@dp.append_flow(target="orders_pg")
def orders():
    return spark.readStream.format("json").schema("id BIGINT, amount DOUBLE").load(os.environ["ORDERS_INPUT"])
'''

#: What Spark's pipelines client raises after a run whose flows ran Python code on the server (any
#: Python data source or UDF): the run completed, but ``execute_command_as_iterator`` in
#: ``pyspark/sql/connect/client/core.py`` does not expect the observed-metrics reply it gets.
SPARK_PIPELINES_CLIENT_ERROR = "[UNKNOWN_RESPONSE] Unknown response: Plan observed(__python_accumulator__"


def test_declarative_pipeline_with_a_twopc_sink_writes_each_row_once(pg_engine, postgres_url, tmp_path) -> None:
    """``spark-pipelines run`` of a pipeline whose sink is ``twopc-postgres``, twice, with new
    input in between: every row once, nothing prepared left."""
    table = f"cx_{uuid.uuid4().hex[:10]}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint, amount double precision)")
    project, inp = tmp_path / "pipeline", tmp_path / "in"
    (project / "transformations").mkdir(parents=True)
    inp.mkdir()
    (project / "spark-pipeline.yml").write_text(_PIPELINE_SPEC.format(storage=(tmp_path / "storage").as_uri()))
    (project / "transformations" / "orders.py").write_text(_PIPELINE_FLOW)
    env = dict(os.environ, **_server_env(), ORDERS_TABLE=table, ORDERS_INPUT=str(inp),
               ORDERS_URL=make_url(postgres_url).set(drivername="postgresql").render_as_string(hide_password=False))
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    for run, ids in enumerate((range(20), range(20, 35))):
        (inp / f"part-{run}.json").write_text("".join(f'{{"id": {i}, "amount": {i}.5}}\n' for i in ids))
        done = subprocess.run([os.path.join(find_spark_home(), "bin", "spark-pipelines"), "run", "--spec",
                               str(project / "spark-pipeline.yml")], cwd=project, env=env, capture_output=True,
                              text=True, timeout=900)
        out = done.stdout + done.stderr
        assert "Run is COMPLETED" in out, out[-4000:]
        assert done.returncode == 0 or SPARK_PIPELINES_CLIENT_ERROR in out, out[-4000:]
        assert _ids(pg_engine, table) == list(range(20 if run == 0 else 35))
    assert [g for g in _prepared(pg_engine) if "twopc" in g] == []


_BLOCK_TWOPC = '''\
import sys


class _NotInstalled:
    """The server's Python as if twopc were installed only in the client."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "twopc":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
'''


def test_registering_with_a_server_that_cannot_import_twopc_names_the_fix(tmp_path) -> None:
    """twopc installed in the client only: register_all fails at once, saying where to install
    it, instead of every later write failing on the server with ModuleNotFoundError."""
    from twopc import ConfigurationError

    (tmp_path / "sitecustomize.py").write_text(_BLOCK_TWOPC)
    with LocalSparkConnect(env={"PYTHONPATH": str(tmp_path)}) as server:
        session = _session(server.url)
        try:
            with pytest.raises(ConfigurationError, match=r"cannot import twopc") as info:
                sinks.register_all(session)
            assert "PYSPARK_PYTHON" in str(info.value) and "pip install" in str(info.value)
            with pytest.raises(Exception, match="DATA_SOURCE_NOT_FOUND"):  # nothing was registered
                session.range(1).write.format("twopc-file").mode("append").option("path", str(tmp_path / "o")).save()
        finally:
            session.stop()
