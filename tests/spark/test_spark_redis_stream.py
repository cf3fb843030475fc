"""twopc-redis-stream in Spark (the shared session), against a real Redis: a failed batch
is replayed with exactly the entries recorded for it, the group moves only after a batch
committed, several streams (one empty) are read, committed entries are trimmed, a missing
group is created, a stream deleted while the query runs stops it with a clear error (or,
with failOnDataLoss=false, is read again once recreated)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from twopc import faultinject, sinks
from twopc.spark._source_env import RUNNER_KEYS


def source(spark: Any, redis_url: str, streams: str, **options: str) -> Any:
    sinks.register_all(spark)
    reader = (spark.readStream.format("twopc-redis-stream").option("url", redis_url).option("streams", streams)
              .option("group", "g").option("fieldsSchema", "n BIGINT"))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_a_failed_batch_replays_its_recorded_entries_and_the_group_moves_only_after_commit(
        spark: Any, redis_url: str, r: Any, prefix: str, tmp_checkpoint: str) -> None:
    a, b, empty = f"{prefix}:a", f"{prefix}:b", f"{prefix}:empty"
    for i in range(1, 13):
        r.xadd(a if i % 3 else b, {"n": str(i)}, id=f"1000-{i}")
    batches: dict[int, list[tuple[str, int]]] = {}
    fail_batch = {1}
    positions: dict[int, bytes] = {}

    def sink(df: Any, batch_id: int) -> None:
        got = df.collect()
        for row in got:  # every column as Spark sees it (the reader yields Arrow batches)
            assert row.id == f"1000-{row.n}" and row.fields == {"n": str(row.n)}, row
            assert row.timestamp.timestamp() == 1.0, row  # the id's milliseconds
        rows = sorted((row.stream, row.n) for row in got)
        if batch_id in batches:
            assert rows == batches[batch_id], "a replay read other entries than the first attempt"
        batches[batch_id] = rows
        positions[batch_id] = r.xinfo_groups(a)[0]["last-delivered-id"]
        if batch_id in fail_batch:
            fail_batch.discard(batch_id)
            # before the sink fails: new entries, and another consumer of the group takes some
            for i in range(13, 16):
                r.xadd(a, {"n": str(i)}, id=f"1000-{i}")
            r.xreadgroup("g", "someone-else", {a: ">"}, count=2)
            raise RuntimeError("the sink failed")

    def run() -> Any:
        return (source(spark, redis_url, f"{a},{b},{empty}", startingPosition="earliest", maxEntriesPerTrigger="5",
                       trimAfterCommit="true", createStreams="true")
                .writeStream.foreachBatch(sink).option("checkpointLocation", tmp_checkpoint)
                .trigger(availableNow=True).start())

    q = run()
    with pytest.raises(StreamingQueryException, match="the sink failed"):
        q.awaitTermination()
    # batch 0 was acknowledged before batch 1 ran; batch 1 was not: what the other consumer
    # took is still pending
    assert positions[1] == f"1000-{max(n for s, n in batches[0] if s == a)}".encode()
    assert r.xinfo_groups(a)[0]["pending"] == 2
    q = run()
    q.awaitTermination()
    seen = [n for rows in batches.values() for _, n in rows]
    assert sorted(seen) == list(range(1, 16)), batches
    assert all(len(rows) <= 5 for rows in batches.values())
    for key in (a, b):
        g = r.xinfo_groups(key)[0]
        assert g["pending"] == 0 and g["lag"] == 0, g
        assert r.xlen(key) == 0  # trimAfterCommit: committed entries are gone
    assert r.xinfo_groups(empty)[0]["name"] == b"g"


def test_a_missing_group_is_created_and_a_deleted_stream_stops_the_query_clearly(
        spark: Any, redis_url: str, r: Any, prefix: str, tmp_checkpoint: str) -> None:
    a = f"{prefix}:a"
    for i in range(1, 4):
        r.xadd(a, {"n": str(i)}, id=f"1000-{i}")
    seen: list[int] = []
    groups: list[Any] = []

    def sink(df: Any, batch_id: int) -> None:
        seen.extend(row.n for row in df.collect())
        if batch_id == 0:
            r.xgroup_destroy(a, "g")  # an operator drops the group: the acknowledgement recreates it
        elif batch_id == 1:
            groups.extend(r.xinfo_groups(a))
            r.delete(a)  # and then the stream

    q = (source(spark, redis_url, a, maxEntriesPerTrigger="2").writeStream.foreachBatch(sink)
         .option("checkpointLocation", tmp_checkpoint).start())
    try:
        with pytest.raises(StreamingQueryException, match=f"stream '{a}' .* was deleted while the query read it"):
            q.processAllAvailable()
    finally:
        q.stop()
    assert [g["last-delivered-id"] for g in groups] == [b"1000-2"]  # recreated at batch 0's end
    assert seen == [1, 2, 3]


def test_with_fail_on_data_loss_false_a_deleted_stream_is_a_warning_and_read_again_once_recreated(
        spark: Any, redis_url: str, r: Any, prefix: str, tmp_checkpoint: str) -> None:
    """Deleted between two runs, then while the query runs (after a batch, before its
    acknowledgement): each time the query goes on and reads the entries of the stream a
    producer recreates."""
    a = f"{prefix}:a"
    for i in range(1, 4):
        r.xadd(a, {"n": str(i)}, id=f"1000-{i}")
    seen: list[int] = []

    def sink(df: Any, _batch: int) -> None:
        got = [row.n for row in df.collect()]
        seen.extend(got)
        if 5 in got:
            r.delete(a)  # while the query runs: the batch's acknowledgement finds no stream

    def query() -> Any:
        return (source(spark, redis_url, a, startingPosition="earliest", failOnDataLoss="false")
                .writeStream.foreachBatch(sink).option("checkpointLocation", tmp_checkpoint))

    query().trigger(availableNow=True).start().awaitTermination()
    r.delete(a)  # between runs
    q = query().start()
    try:
        q.processAllAvailable()
        for i in (4, 5):
            r.xadd(a, {"n": str(i)})  # a producer recreates it (new ids, after the old ones)
        q.processAllAvailable()
        r.xadd(a, {"n": "6"})
        q.processAllAvailable()
    finally:
        q.stop()
    assert seen == [1, 2, 3, 4, 5, 6]


def _source_env_keys(spark: Any) -> set[str]:
    """The keys of the environment map Spark shares among every function of the registered
    twopc-redis-stream source (what PythonStreamingSourceRunner.init() puts into)."""
    ds = spark._jsparkSession.sessionState().dataSourceManager().lookupDataSource("twopc-redis-stream")
    return set(ds.dataSourceCls().envVars().keySet())


def test_starting_a_query_changes_no_structure_of_the_sources_shared_environment(
        spark: Any, redis_url: str, r: Any, prefix: str, tmp_checkpoint: str) -> None:
    # Two queries over one source in one session raced on this map (OptionalDataException in
    # ResultTask.runTask, see twopc/spark/_source_env.py): the runner's insertions must be replacements.
    a = f"{prefix}:a"
    r.xadd(a, {"n": "1"})
    df = source(spark, redis_url, a, startingPosition="earliest")
    before = _source_env_keys(spark)
    assert set(RUNNER_KEYS) <= before
    assert not set(RUNNER_KEYS) & set(spark.sparkContext.environment), "the keys stay out of other functions"
    q = (df.writeStream.foreachBatch(lambda d, _b: d.count()).option("checkpointLocation", tmp_checkpoint)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    assert _source_env_keys(spark) == before, "the source runner inserted keys into the shared map"


def test_entries_postgres_refuses_go_to_the_dead_letter_table_and_are_acknowledged(
        spark: Any, redis_url: str, r: Any, prefix: str, tmp_checkpoint: str, postgres_url: str,
        pg_engine: Any) -> None:
    """The one Spark run of the dead-letter route (its cases are sink-level, in
    test_postgres_dead_letter.py): the option passes through Spark, and a refused entry
    neither stalls the query nor stays pending."""
    stream, table, dead = f"{prefix}:orders", f"o_{prefix}", f"d_{prefix}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (stream text, id text PRIMARY KEY, n bigint CHECK (n >= 0))")
    try:
        for i in range(1, 11):
            r.xadd(stream, {"n": str(-i if i in (4, 9) else i)}, id=f"1000-{i}")
        q = (source(spark, redis_url, stream, startingPosition="earliest").select("stream", "id", "n")
             .writeStream.format("twopc-postgres").option("url", postgres_url).option("dbtable", table)
             .option("deadLetterTable", dead).option("checkpointLocation", tmp_checkpoint)
             .trigger(availableNow=True).start())
        q.awaitTermination()
        with pg_engine.connect() as c:
            kept = [row[0] for row in c.exec_driver_sql(f"SELECT n FROM {table} ORDER BY n")]
            buried = [tuple(row) for row in c.exec_driver_sql(f"SELECT entry_id, left(reason, 5) FROM {dead} "
                                                              f"ORDER BY entry_id")]
        assert kept == [1, 2, 3, 5, 6, 7, 8, 10]
        assert buried == [("1000-4", "23514"), ("1000-9", "23514")]
        g = r.xinfo_groups(stream)[0]
        assert g["pending"] == 0 and g["lag"] == 0, g
    finally:
        with pg_engine.begin() as c:
            c.exec_driver_sql(f"DROP TABLE IF EXISTS {table}, {dead}")


def test_with_ack_group_the_sinks_commit_acknowledges_the_entries_before_the_source_would(
        spark: Any, redis_url: str, r: Any, prefix: str, tmp_path: Any) -> None:
    """Acknowledging in the sink's commit through Spark: stream -> twopc-redis counters with
    ``ackGroup``. The query is
    stopped right after the sink's commit (``after_commit``), before Spark's commit log and
    so before the source could acknowledge anything: the group has moved anyway, by the
    sink's commit, in the same call that applied the counters. A restart replays the batch
    (already committed: nothing applied twice) and finishes."""
    tag = f"{prefix}t"
    stream = f"{{{tag}}}:in"
    for i in range(1, 7):
        r.xadd(stream, {"n": str(i)}, id=f"1000-{i}")
    mapping = json.dumps([{"op": "INCRBY", "key": "{{" + tag + "}}:total", "by": "{n}"}])

    def run() -> None:
        (source(spark, redis_url, stream, startingPosition="earliest").select("stream", "id", "n")
         .writeStream.format("twopc-redis").option("url", redis_url).option("mapping", mapping)
         .option("hashTag", tag).option("ackGroup", "g").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start().awaitTermination())

    sc = spark.sparkContext
    try:
        with faultinject.armed("after_commit@batch=0:raise", tmp_path / "faults", spark_context=sc):
            sinks.register_all(spark)  # a data source's Python workers get the environment of its registration
            with pytest.raises(StreamingQueryException, match="after_commit"):
                run()
    finally:
        sinks.register_all(spark)  # disarmed for what follows
    assert int(r.get(f"{{{tag}}}:total")) == 21  # the batch committed
    g = r.xinfo_groups(stream)[0]
    assert g["last-delivered-id"] == b"1000-6" and g["lag"] == 0, g  # and acknowledged, by the sink
    run()
    assert int(r.get(f"{{{tag}}}:total")) == 21
    g = r.xinfo_groups(stream)[0]
    assert g["pending"] == 0 and g["lag"] == 0, g
