"""``python -m twopc.recovery.demos.bench_composite``: a two-target composite against the same two
sinks written as two separate writes, in one run, on the same rows.

Throughput of ``twopc-composite`` (a PostgreSQL table and Redis counters, one decision a batch)
against ``twopc-postgres`` then ``twopc-redis`` (target: not slower), and the visibility gap: how
long after the first participant's commit the last is done. Throwaway servers unless
``TWOPC_BENCH_POSTGRES_URL`` / ``TWOPC_BENCH_REDIS_URL`` are set."""

from __future__ import annotations

import functools
import json
import logging
import logging.handlers
import os
import statistics
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._bench_common import count_rows, run_sql, timed

__all__ = ["main"]

COMPOSITE = "twopc-composite (PostgreSQL + Redis, one write)"
SEPARATE = "twopc-postgres, then twopc-redis (two writes)"


def _targets(pg_url: str, redis_url: str, tag: str) -> tuple[dict[str, str], dict[str, str], str]:
    """Options of the PostgreSQL sink, of the Redis sink, and the table name."""
    table = f"bench_{uuid.uuid4().hex[:10]}"
    run_sql(pg_url, f"CREATE TABLE {table} (id bigint NOT NULL, payload text, amount double precision)")
    t = "{{" + tag + "}}"
    mapping = json.dumps([{"op": "INCRBY", "key": f"{t}:total", "by": 1},
                          {"op": "HINCRBY", "key": f"{t}:per_category", "field": "{category}", "by": 1}])
    return {"url": pg_url, "dbtable": table}, {"url": redis_url, "hashTag": tag, "mapping": mapping}, table


def _composite_options(pg: dict[str, str], rd: dict[str, str]) -> dict[str, str]:
    return {"targets": "orders,counters", "orders.format": "twopc-postgres", "orders.columns": "id, payload, amount",
            **{f"orders.{k}": v for k, v in pg.items()}, "counters.format": "twopc-redis",
            "counters.columns": "category", **{f"counters.{k}": v for k, v in rd.items()}}


def _check(pg_url: str, table: str, redis_url: str, tag: str, rows: int) -> None:
    import redis
    n = count_rows(pg_url, table, "count(*), count(DISTINCT id)")
    r = redis.Redis.from_url(redis_url)
    total = int(r.get("{" + tag + "}:total") or 0)
    r.close()
    assert n == (rows, rows) and total == rows, f"wrote {n} rows and counted {total}, expected {rows}"


def bench_throughput(spark: Any, df: Any, rows: int, pg_url: str, redis_url: str, work: Path,
                     repeats: int) -> dict[str, list[float]]:
    """Seconds per write of *df* (warm-up excluded), the two ways interleaved."""
    results: dict[str, list[float]] = {COMPOSITE: [], SEPARATE: []}
    def composite(d: Any, n: int) -> Callable[[], None]:
        tag = "bc" + uuid.uuid4().hex[:8]
        pg, rd, table = _targets(pg_url, redis_url, tag)
        ck = str(work / f"ck-{tag}")
        def write() -> None:
            (d.write.format("twopc-composite").mode("append").options(**_composite_options(pg, rd))
             .option("checkpointLocation", ck).option("txnVersion", "1").save())
            _check(pg_url, table, redis_url, tag, n)
        return write
    def separate(d: Any, n: int) -> Callable[[], None]:
        tag = "bs" + uuid.uuid4().hex[:8]
        pg, rd, table = _targets(pg_url, redis_url, tag)
        def write() -> None:
            (d.select("id", "payload", "amount").write.format("twopc-postgres").mode("append").options(**pg)
             .option("checkpointLocation", str(work / f"ck-{tag}-pg")).option("txnVersion", "1").save())
            (d.select("category").write.format("twopc-redis").mode("append").options(**rd)
             .option("checkpointLocation", str(work / f"ck-{tag}-redis")).option("txnVersion", "1").save())
            _check(pg_url, table, redis_url, tag, n)
        return write
    small = df.limit(1000)
    composite(small, 1000)()
    separate(small, 1000)()
    for _ in range(repeats):  # interleaved, so drift hits both alike
        for name, make in ((COMPOSITE, composite), (SEPARATE, separate)):
            results[name].append(timed(make(df, rows)))
    return results


def bench_gap(pg_url: str, redis_url: str, work: Path, *, batches: int, partitions: int,
              rows_per_partition: int) -> tuple[list[float], list[float]]:
    """Per batch, through the real coordinator: ms from the end of the first participant's commit to
    the end of the last's, and from the start of the first to the end of the last."""
    import pyarrow as pa

    from twopc import CommitCoordinator, CommitLedger, TransactionContext, sinks
    tag = "bg" + uuid.uuid4().hex[:8]
    pg, rd, _table = _targets(pg_url, redis_url, tag)
    sink = sinks.OptionsCompositeSink.from_options(_composite_options(pg, rd))
    schema = pa.schema([("id", pa.int64()), ("payload", pa.string()), ("amount", pa.float64()),
                        ("category", pa.string())])
    sink.configure_write(schema, overwrite=False, streaming=True, checkpointed=True)
    sink.validate(schema)
    ledger = CommitLedger(str(work / "ck-gap"))
    sid = ledger.bind_sink_id(None, default="benchgap")
    ledger.claim()
    coord = CommitCoordinator(sink, ledger, sid)
    handler = logging.handlers.BufferingHandler(1 << 30)  # every record, till cleared
    logger = logging.getLogger("twopc.composite")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.DEBUG)
    gaps, windows = [], []
    try:
        for b in range(batches):
            handles = []
            for p in range(partitions):
                first = (b * partitions + p) * rows_per_partition
                ids = list(range(first, first + rows_per_partition))
                txn = sink.begin_transaction(TransactionContext(sid, b, p, b * partitions + p))
                sink.invoke_batch(txn, pa.record_batch({
                    "id": pa.array(ids, pa.int64()), "payload": [f"payload-{i}" for i in ids],
                    "amount": [i * 0.5 for i in ids], "category": [f"c{i % 10}" for i in ids]}, schema=schema))
                handles.append(sink.pre_commit(txn))
            handler.buffer.clear()
            coord.commit_batch(b, handles)
            events = [vars(r)["twopc"] for r in handler.buffer if vars(r).get("twopc_event") == "participant_committed"]
            done = [e["ms_since_first"] for e in events if e["batch"] == b]
            gaps.append(max(done) - min(done))
            windows.append(max(done))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
        sink.close()
    return gaps, windows


def main(argv: Sequence[str] | None = None) -> int:
    from ._bench_common import ROW_EXPRS, bench_main_setup, bench_session, module_parser, server_url
    parser = module_parser("bench_composite", __doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gap-batches", type=int, default=20)
    args = parser.parse_args(argv)
    bench_main_setup()
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from twopc.faultinject import LocalPostgres, LocalRedis
    given = os.environ.get("TWOPC_BENCH_POSTGRES_URL")
    where = ("servers from TWOPC_BENCH_*_URL" if given
             else "throwaway LocalPostgres (fsync on) and LocalRedis (appendfsync always)")
    redis = functools.partial(LocalRedis, appendfsync="always")
    with (server_url(given, LocalPostgres) as pg_url, server_url(os.environ.get("TWOPC_BENCH_REDIS_URL"), redis)
          as redis_url, tempfile.TemporaryDirectory(prefix="twopc-bench-") as tmp):
        spark = bench_session("twopc-bench-composite", driver_host="127.0.0.1", driver_bindAddress="127.0.0.1")
        try:
            df = spark.range(0, args.rows, numPartitions=args.partitions).selectExpr(
                *ROW_EXPRS[:3], "concat('c', cast(id % 10 AS string)) AS category").cache()
            df.count()
            print(f"bench: {args.rows} rows, {args.partitions} partitions, local[2]; {where}")
            results = bench_throughput(spark, df, args.rows, pg_url, redis_url, Path(tmp), args.repeats)
        finally:
            spark.stop()
        rate = {name: args.rows / statistics.median(v) for name, v in results.items()}
        for name, r in rate.items():
            print(f"  {name:<50} {r:>10,.0f} rows/s   (median of {args.repeats})")
        ratio = rate[COMPOSITE] / rate[SEPARATE]
        print(f"  ratio composite / two writes                       {ratio:>10.2f}x   target >= 1.00: "
              f"{'MET' if ratio >= 1.0 else 'MISSED'}")
        from ._bench_results import record
        record("composite.vs_two_writes", ratio, f"{rate[COMPOSITE]:,.0f} / {rate[SEPARATE]:,.0f} rows/s, "
                                                 f"median of {args.repeats}")
        gaps, windows = bench_gap(pg_url, redis_url, Path(tmp), batches=args.gap_batches,
                                  partitions=args.partitions, rows_per_partition=1000)
        print(f"visibility while a batch commits ({args.gap_batches} batches of {args.partitions} x 1000 rows, "
              f"ms: median / p95 / max):")
        for label, values in (("PostgreSQL committed, Redis not yet", gaps),
                              ("first commit started -> last target done", windows)):
            q = statistics.quantiles(values, n=20, method="inclusive") if len(values) >= 2 else values * 19
            print(f"  {label:<48} {statistics.median(values):>7.2f} / {q[18]:.2f} / {max(values):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
