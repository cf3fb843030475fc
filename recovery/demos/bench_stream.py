"""``python -m twopc.recovery.demos.bench_stream``: the Redis Stream source end to end, against the
same pipeline at-least-once, in one run, on the same entries, as a ratio.

Exactly-once: ``twopc-redis-stream`` into ``twopc-postgres``. At-least-once, as a user writes it
without twopc: ``foreachBatch`` doing ``XREADGROUP`` on the driver, Spark's JDBC writer, ``XACK``.
Every run is checked (one row per entry, nothing pending) and split into the query's start and its
micro-batches. Throwaway servers unless ``TWOPC_BENCH_POSTGRES_URL`` / ``TWOPC_BENCH_REDIS_URL``."""

from __future__ import annotations

import datetime
import functools
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._bench_common import module_parser

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["main"]

STREAMS = ("{bench}:orders", "{bench}:refunds")
WARM_STREAMS = ("{bench}:warm-a", "{bench}:warm-b")
EXACTLY = "twopc-redis-stream -> twopc-postgres (exactly-once)"
AT_LEAST = "XREADGROUP + Spark JDBC writer + XACK (at-least-once)"
FLOOR = "no-op Python source -> no-op Python sink, one row"
FIELDS = "n BIGINT, payload STRING"


@dataclass(frozen=True)
class Timing:
    """Seconds of one run: *total* (query start to end), *start* (to the first micro-batch),
    *batches* (first micro-batch's start to the end of the last that carried entries)."""

    total: float
    start: float
    batches: float


def _timing(query: StreamingQuery, started: float, ended: float, carried: Callable[[dict[str, Any]], bool]) -> Timing:
    """The :class:`Timing` of *query* from its progress reports; *carried* tells batches with entries."""
    progress = query.recentProgress
    if not progress or progress[0]["batchId"] != 0:
        raise SystemExit("bench: the query's first progress report is missing (raise "
                         "spark.sql.streaming.numRecentProgressUpdates)")
    def epoch(p: dict[str, Any]) -> float:
        return datetime.datetime.fromisoformat(p["timestamp"]).timestamp()
    data = [p for p in progress if carried(p)]
    first, last = epoch(progress[0]), max(epoch(p) + p["durationMs"]["triggerExecution"] / 1000 for p in data)
    return Timing(ended - started, first - started, last - first)


def produce(redis_url: str, streams: Sequence[str], count: int) -> None:
    """(Re)create *streams* with entries ``n = 0 .. count-1`` round-robin, pipelined."""
    import redis
    client = redis.Redis.from_url(redis_url)
    try:
        client.delete(*streams)
        pipe = client.pipeline(transaction=False)
        for n in range(count):
            pipe.xadd(streams[n % len(streams)], {"n": str(n), "payload": f"event-{n}"})
            if n % 1000 == 999:
                pipe.execute()
        pipe.execute()
    finally:
        client.close()


def check(redis_url: str, pg_url: str, streams: Sequence[str], group: str, table: str, count: int) -> None:
    """Every entry one row, nothing pending or lagging in *group*; else ``SystemExit``."""
    import redis

    from ._bench_common import count_rows
    found = count_rows(pg_url, table)[0]
    client: Any = redis.Redis.from_url(redis_url)  # redis-py's command methods are loosely typed
    try:
        left = [f"{s}: pending {g['pending']}, lag {g.get('lag')}" for s in streams for g in client.xinfo_groups(s)
                if g["name"].decode() == group and (int(g["pending"]) or g.get("lag") != 0)]
    finally:
        client.close()
    if found != count or left:
        raise SystemExit(f"bench: group {group} wrote {found} rows (expected {count}); {'; '.join(left) or ''}")


def run_exactly_once(spark: SparkSession, redis_url: str, pg_url: str, streams: Sequence[str], group: str,
                     table: str, batch: int, checkpoint: str) -> Timing:
    """How long the twopc pipeline takes to read and commit everything *streams* hold now."""
    started = time.time()
    q = (spark.readStream.format("twopc-redis-stream").option("url", redis_url).option("streams", ",".join(streams))
         .option("group", group).option("startingPosition", "earliest").option("maxEntriesPerTrigger", batch)
         .option("fieldsSchema", FIELDS).load()
         .selectExpr("stream", "id AS entry_id", "n", "payload")
         .writeStream.format("twopc-postgres").option("url", pg_url).option("dbtable", table)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination()
    return _timing(q, started, time.time(), lambda p: p.get("numInputRows", 0) > 0)


def run_at_least_once(spark: SparkSession, redis_url: str, pg_url: str, streams: Sequence[str], group: str,
                      table: str, batch: int, checkpoint: str) -> Timing:
    """How long the plain pipeline (see the module docstring) takes to drain *streams*."""
    import pyarrow as pa
    import redis

    from ._bench_common import append, jdbc_options
    jdbc = jdbc_options(pg_url)
    client: Any = redis.Redis.from_url(redis_url)  # redis-py's command methods are loosely typed
    for s in streams:
        client.xgroup_create(s, group, id="0", mkstream=True)
    drained = threading.Event()
    carried: set[int] = set()
    per_stream = max(1, batch // len(streams))
    def step(_tick: DataFrame, batch_id: int) -> None:
        if drained.is_set():
            return
        got = client.xreadgroup(group, "bench", dict.fromkeys(streams, ">"), count=per_stream)
        cols: dict[str, list[Any]] = {"stream": [], "entry_id": [], "n": [], "payload": []}
        acks: dict[str, list[bytes]] = {}
        for key, entries in got:
            s = key.decode()
            for eid, fields in entries:
                cols["stream"].append(s)
                cols["entry_id"].append(eid.decode())
                cols["n"].append(int(fields[b"n"]))
                cols["payload"].append(fields[b"payload"].decode())
                acks.setdefault(s, []).append(eid)
        if not cols["n"]:
            drained.set()
            return
        append(spark.createDataFrame(pa.table(cols)), "jdbc", table, jdbc, batchsize="10000")
        for s, ids in acks.items():
            client.xack(s, group, *ids)
        carried.add(batch_id)
    started = time.time()
    q = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1).option("numPartitions", 1).load()
         .writeStream.foreachBatch(step).option("checkpointLocation", checkpoint).start())
    try:
        while not drained.wait(0.05):
            if not q.isActive:
                q.awaitTermination()  # raises the query's error
                raise SystemExit("bench: the at-least-once query stopped before the streams were drained")
    finally:
        ended = time.time()
        q.stop()
        client.close()
    return _timing(q, started, ended, lambda p: int(p["batchId"]) in carried)


def run_floor(spark: SparkSession, fmt: str, checkpoint: str) -> Timing:
    """The no-op Python source into the no-op Python sink: Spark's floor for a Python source's start."""
    started = time.time()
    q = (spark.readStream.format(fmt).load().writeStream.format(fmt).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    return _timing(q, started, time.time(), lambda p: p.get("numInputRows", 0) > 0)


def bench(redis_url: str, pg_url: str, entries: int, batch: int, rounds: int, work: Path) -> dict[str, list[Timing]]:
    """The :class:`Timing` of each pipeline and of the no-op floor, *rounds* times (interleaved)."""
    import runpy

    from ._bench_common import JDBC_JAR, bench_session
    from .pipeline import create_table
    if not os.path.exists(JDBC_JAR):
        raise SystemExit(f"bench: {JDBC_JAR} missing (apt-get install libpostgresql-jdbc-java)")
    spark = bench_session("twopc-bench-stream", sql_shuffle_partitions="2", jars=JDBC_JAR,
                          sql_streaming_numRecentProgressUpdates="10000")
    # by value, as a notebook's own class: the floor's source process imports nothing of the project
    noop = runpy.run_path(str(Path(__file__).with_name("_noop.py")))
    spark.dataSource.register(noop["NoopDataSource"])
    produce(redis_url, STREAMS, entries)
    produce(redis_url, WARM_STREAMS, max(2, min(entries, batch) // 2))
    plan = [(EXACTLY, "eo", run_exactly_once), (AT_LEAST, "alo", run_at_least_once)]
    results: dict[str, list[Timing]] = {}
    for _name, tag, run in plan:
        create_table(pg_url, f"bench_{tag}_warm")
        run(spark, redis_url, pg_url, WARM_STREAMS, f"bench-{tag}-warm", f"bench_{tag}_warm", batch,
            str(work / f"{tag}-warm"))
    run_floor(spark, noop["NOOP_FORMAT"], str(work / "floor-warm"))
    for r in range(rounds):
        for name, tag, run in plan:
            group, table = f"bench-{tag}-{r}", f"bench_{tag}_{r}"
            create_table(pg_url, table)
            t = run(spark, redis_url, pg_url, STREAMS, group, table, batch, str(work / f"{tag}-{r}"))
            check(redis_url, pg_url, STREAMS, group, table, entries)
            results.setdefault(name, []).append(t)
            print(f"bench: round {r + 1}: {name:<55} {entries / t.total:>9,.0f} entries/s  ({t.total:.2f}s: "
                  f"start {t.start:.2f}s, micro-batches {t.batches:.2f}s)", flush=True)
        t = run_floor(spark, noop["NOOP_FORMAT"], str(work / f"floor-{r}"))
        results.setdefault(FLOOR, []).append(t)
        print(f"bench: round {r + 1}: {FLOOR:<55} start {t.start:.2f}s", flush=True)
    spark.stop()
    return results


def report(results: dict[str, list[Timing]], entries: int, batch: int) -> None:
    """Medians, each round's ratio and the target, then the split into start and micro-batches."""
    from ._bench_results import record
    from .bench_summary import TARGETS, judge
    rounds = len(results[EXACTLY])
    print(f"\nRedis Stream -> PostgreSQL, {entries:,} entries in {len(STREAMS)} streams, micro-batches of {batch:,}, "
          f"local[2], {'median of ' + str(rounds) + ' rounds' if rounds > 1 else 'one round'}:")
    rate = {name: [entries / t.total for t in results[name]] for name in (EXACTLY, AT_LEAST)}
    med = {name: statistics.median(v) for name, v in rate.items()}
    for name, v in rate.items():
        spread = f"   [{min(v):,.0f} .. {max(v):,.0f}]" if len(v) > 1 else ""
        print(f"  {name:<55} {med[name]:>9,.0f} entries/s{spread}")
    ratio = med[EXACTLY] / med[AT_LEAST]
    per_round = [e / a for e, a in zip(rate[EXACTLY], rate[AT_LEAST], strict=True)]
    rounds_text = f"   (per round: {', '.join(f'{x:.2f}x' for x in per_round)})" if rounds > 1 else ""
    target = TARGETS["stream.exactly_vs_at_least"]
    print(f"\ntarget: exactly-once >= {target.goal:g}x at-least-once: {med[EXACTLY]:,.0f} / {med[AT_LEAST]:,.0f} = "
          f"{ratio:.2f}x   {judge(target, ratio)}{rounds_text}")
    record("stream.exactly_vs_at_least", ratio, f"{med[EXACTLY]:,.0f} / {med[AT_LEAST]:,.0f} entries/s, "
                                                f"median of {rounds} rounds")
    start = {name: statistics.median(t.start for t in v) for name, v in results.items()}
    steady = {name: statistics.median(entries / t.batches for t in results[name]) for name in (EXACTLY, AT_LEAST)}
    print("\nthe same runs split (medians): the query's start, to its first micro-batch; then the micro-batches, "
          "from the first one's start to the end of the last that carried entries:")
    for name in (EXACTLY, AT_LEAST):
        print(f"  {name:<55} start {start[name]:5.2f} s   micro-batches {steady[name]:>9,.0f} entries/s")
    print(f"  {FLOOR:<55} start {start[FLOOR]:5.2f} s   (Spark's floor for a Python streaming source's start)")
    batches = steady[EXACTLY] / steady[AT_LEAST]
    print(f"  micro-batches alone: exactly-once / at-least-once = {batches:.2f}x; the exactly-once query's start is "
          f"{start[EXACTLY] / start[FLOOR]:.2f}x the no-op Python source's (PySpark starts a Python process on the "
          f"driver for a Python source; the at-least-once query's source is in the JVM)")
    record("stream.batches_exactly_vs_at_least", batches,
           f"{steady[EXACTLY]:,.0f} / {steady[AT_LEAST]:,.0f} entries/s, median of {rounds} rounds")
    record("stream.start_exactly_vs_python_floor", start[EXACTLY] / start[FLOOR],
           f"{start[EXACTLY]:.2f} s / {start[FLOOR]:.2f} s; at-least-once (a JVM source) {start[AT_LEAST]:.2f} s, "
           f"median of {rounds} rounds")


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench_stream", __doc__)
    parser.add_argument("--entries", type=int, default=200_000, help="entries in the streams (default 200000)")
    parser.add_argument("--batch", type=int, default=20_000, help="entries per micro-batch (default 20000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both pipelines, interleaved (default 3)")
    args = parser.parse_args(argv)
    from twopc import faultinject

    from ._bench_common import bench_main_setup, server_url
    bench_main_setup()
    redis = functools.partial(faultinject.LocalRedis, appendfsync="always")
    with (tempfile.TemporaryDirectory(prefix="twopc-bench-stream-") as work,
          server_url(os.environ.get("TWOPC_BENCH_POSTGRES_URL"), faultinject.LocalPostgres) as pg_url,
          server_url(os.environ.get("TWOPC_BENCH_REDIS_URL"), redis) as redis_url):
        results = bench(redis_url, pg_url, args.entries, args.batch, max(1, args.rounds), Path(work))
    report(results, args.entries, args.batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
