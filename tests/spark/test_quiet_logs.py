"""Normal writes log no WARNING: INFO says the choices twopc makes (the commit mode, the
lease, a batch's summary); WARNING is kept for what the user should act on.

Spark runs twopc's planning, tasks and commits in Python worker processes, whose ``twopc``
records go to their stderr (:func:`twopc._logs.configure_worker_logging`) and from there
through the JVM into pytest's global capture; the driver's own records (the streaming
query listener) reach ``caplog``. Both are read."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from twopc import sinks
from twopc.sinks.redis import HSetOp, IncrByOp, mapping_json

#: A worker's twopc record at WARNING or above, as the worker's stderr handler formats it.
_LOUD = re.compile(r"^\S+ \S+ (?:WARNING|ERROR|CRITICAL) pyspark-twopc[\w.]*: .*$", re.MULTILINE)


@pytest.fixture(scope="module", autouse=True)
def _registered(spark: Any) -> None:
    sinks.register_all(spark)


def _df(spark: Any, lo: int, n: int = 12) -> Any:
    return spark.range(lo, lo + n, numPartitions=3).selectExpr("id", "concat('p', id) AS payload")


def test_normal_writes_log_no_warning(spark: Any, postgres_url: str, pg_engine: sa.Engine, redis_url: str,
                                      tmp_path: Path, console: Callable[[], str],
                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="twopc")
    dropin, stream = (f"ql_{uuid.uuid4().hex[:10]}" for _ in range(2))
    with pg_engine.begin() as c:
        for t in (dropin, stream):
            c.exec_driver_sql(f"CREATE TABLE {t} (id bigint NOT NULL, payload text)")

    for lo in (0, 100):  # twopc-jdbc as a drop-in (default options, no checkpoint), twice
        _df(spark, lo).write.format("twopc-jdbc").mode("append").option("url", postgres_url) \
            .option("dbtable", dropin).save()

    inp = tmp_path / "in"
    _df(spark, 0).write.json(str(inp / "a"))
    for _ in range(2):  # twopc-postgres streaming, started twice on one checkpoint
        q = (spark.readStream.schema("id long, payload string").json(str(inp / "a"))
             .writeStream.format("twopc-postgres").option("url", postgres_url).option("dbtable", stream)
             .option("checkpointLocation", str(tmp_path / "ck-stream")).trigger(availableNow=True).start())
        q.awaitTermination()
        _df(spark, 100).write.mode("append").json(str(inp / "a"))

    tag = uuid.uuid4().hex[:8]
    t = "{{" + tag + "}}"  # "{" is written "{{" in a mapping's key template
    mapping = mapping_json([IncrByOp(f"{t}:total", 1), HSetOp(f"{t}:row:{{id}}", columns=("payload",))])
    key = f"{{{tag}}}"
    for version in ("1", "2", "2"):  # the last one reruns a committed job: it writes nothing
        _df(spark, 0).write.format("twopc-redis").mode("append").option("url", redis_url) \
            .option("mapping", mapping).option("hashTag", tag) \
            .option("checkpointLocation", str(tmp_path / "ck-redis")).option("txnVersion", version).save()

    with pg_engine.connect() as c:
        counts = [c.exec_driver_sql(f"SELECT count(*) FROM {n}").scalar_one() for n in (dropin, stream)]
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        assert counts == [24, 24] and r.get(f"{key}:total") == "24"
    finally:
        r.delete(f"{key}:total", *r.keys(f"{key}:row:*"))
        r.close()

    text = console()
    assert "twopc" in text, "the workers' twopc records are not in the capture: nothing to check"
    assert not _LOUD.findall(text), "\n".join(_LOUD.findall(text))
    loud = [f"{r.levelname} {r.name}: {r.getMessage()}" for r in caplog.records
            if r.levelno >= logging.WARNING and r.name.split(".")[0] in ("twopc", "twopc.sinks")]
    assert not loud, loud
