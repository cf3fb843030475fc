"""``make bench``, the fixed and per-batch costs beside the same work without twopc: the protocol
cost at 2 to 200 partitions, a 20,000-row drop-in write against Spark's JDBC writer, and
micro-batch latency against ``foreachBatch`` and a no-op Python stream sink."""

from __future__ import annotations

import functools
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._bench_common import JDBC_JAR, ROW_EXPRS, commit_each, copy_rows, create_table, libpq_dsn, timed

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["PARTITIONS", "bench_micro_batches", "bench_partitions", "bench_small_write", "report_scaling"]

#: partition counts of the protocol-cost rows
PARTITIONS = (2, 16, 64, 200)
SMALL_ROWS = 20_000
MICRO_TWOPC = "twopc-jdbc (exactly-once)"
MICRO_FOREACH = "spark jdbc in foreachBatch (at-least-once)"
MICRO_NOOP = "no-op Python stream sink (Spark's floor)"


def bench_partitions(url: str, work: Path, batches: int) -> dict[int, dict[str, float]]:
    """Per partition count, median ms per batch of the driver's commit (``commit``), plus plan-time recovery
    (``protocol``), of plain commits (``plain``) and of the prepared transactions committed without the protocol
    (``floor``: PostgreSQL flushes its WAL per ``COMMIT PREPARED``); the kinds alternate round by round, order reversed
    every other round, so load falls on all alike. ``ratio`` is the median of the rounds' commit / floor; the commit's
    phases (``decision``, ``commits``, ``mark``, ``sweep``) are medians too."""
    dsn = libpq_dsn(url)
    out: dict[int, dict[str, float]] = {}
    for n in PARTITIONS:
        rounds = max(15, batches * 2 // n)
        out[n] = row = _partitions_row(url, dsn, work, n, rounds)
        print(f"bench: {n:>3} partitions: commit {row['commit']:7.2f} ms, protocol {row['protocol']:7.2f} ms, "
              f"plain commits {row['plain']:7.2f} ms, COMMIT PREPARED floor {row['floor']:7.2f} ms "
              f"(median of {rounds}, alternated; commit / floor per round {row['ratio']:.2f}x; phases: "
              + ", ".join(f"{k} {row[k]:.2f}" for k in _PHASES if k in row) + " ms)", flush=True)
    return out


def _partitions_row(url: str, dsn: str, work: Path, n: int, rounds: int) -> dict[str, float]:
    import psycopg
    import pyarrow as pa

    from twopc import CommitCoordinator, CommitLedger, RecoveryCoordinator, TransactionContext
    from twopc.sinks import PostgresSink
    data = pa.RecordBatch.from_pydict({"id": list(range(10)), "payload": ["x"] * 10, "amount": [0.5] * 10,
                                       "ts": pa.array([1_767_225_600_000_000] * 10, pa.timestamp("us", "UTC"))})
    table = f"bench_parts_{n}"
    create_table(url, table)
    phases: dict[str, float] = {}
    sink = PostgresSink(url, table)
    sink.validate(data.schema)
    ledger = CommitLedger(str(work / f"parts-ck-{n}"))
    _time_phases(phases, sink, ledger)
    coord = CommitCoordinator(sink, ledger, f"parts{n}")
    series: dict[str, list[float]] = {}
    conns = [psycopg.connect(dsn) for _ in range(min(n, 16))]
    floor = _PreparedFloor(dsn, table, n)
    def protocol_batch(b: int) -> None:
        plan = timed(lambda: RecoveryCoordinator(sink, ledger, sink_id=f"parts{n}").run())
        handles = []
        for p in range(n):
            txn = sink.begin_transaction(TransactionContext(f"parts{n}", b, p, b * n + p))
            sink.invoke_batch(txn, data)
            handles.append(sink.pre_commit(txn))
        phases.clear()
        commit = timed(lambda: coord.commit_batch(b, handles))
        series.setdefault("commit", []).append(commit)
        series.setdefault("protocol", []).append(plan + commit)
        for k, v in phases.items():
            series.setdefault(k, []).append(v)
    def plain_batch(_b: int) -> None:
        total = 0.0
        for start in range(0, n, len(conns)):
            group = conns[:min(len(conns), n - start)]
            for c in group:
                copy_rows(c, table, 10)
            total += timed(functools.partial(commit_each, group))
        series.setdefault("plain", []).append(total)
    def floor_batch(b: int) -> None:
        series.setdefault("floor", []).append(floor.round(b))
    try:
        kinds = [protocol_batch, floor_batch, plain_batch]
        for b in range(rounds):
            for run in (kinds if b % 2 == 0 else kinds[::-1]):
                run(b)
    finally:
        sink.close()
        floor.close()
        for c in conns:
            c.close()
    row = {k: statistics.median(v) * 1000 for k, v in series.items()}
    row["ratio"] = statistics.median(c / f for c, f in zip(series["commit"], series["floor"], strict=True))
    return row


def bench_small_write(spark: SparkSession, url: str, work: Path, repeat: int) -> dict[str, list[float]]:
    """Seconds of a 20k-row write: the drop-in, the same with a checkpoint, and Spark's JDBC writer
    (when its jar is there); *repeat* interleaved rounds after a warm-up each."""
    from ._bench_common import append, jdbc_options
    df = spark.range(SMALL_ROWS, numPartitions=2).selectExpr(*ROW_EXPRS).cache()
    df.count()
    jdbc = jdbc_options(url)
    writers: dict[str, Callable[[DataFrame, str, int], None]] = {
        "twopc-jdbc drop-in (no checkpoint)": lambda d, t, _v: append(d, "twopc-jdbc", t, jdbc),
        "twopc-jdbc with checkpointLocation": lambda d, t, v: append(
            d, "twopc-jdbc", t, jdbc, checkpointLocation=str(work / "small-ck" / t), txnVersion=str(v))}
    if os.path.exists(JDBC_JAR):
        writers["spark jdbc"] = lambda d, t, _v: append(d, "jdbc", t, jdbc)
    out: dict[str, list[float]] = {}
    for i, write in enumerate(writers.values()):
        create_table(url, f"bench_small_{i}")
        write(df, f"bench_small_{i}", 1)  # warm-up
    for r in range(repeat):
        for i, (name, write) in enumerate(writers.items()):
            seconds = timed(lambda: write(df, f"bench_small_{i}", r + 2))  # noqa: B023 - called at once
            out.setdefault(name, []).append(seconds)
            print(f"bench: small write, {name:<40} {seconds:6.2f} s", flush=True)
    df.unpersist()
    return out


def bench_micro_batches(spark: SparkSession, url: str, work: Path, batches: int, rounds: int) -> dict[str, list[float]]:
    """ms of ``triggerExecution`` per micro-batch (1,000 rows from JSON files): ``twopc-jdbc`` vs
    ``foreachBatch`` + Spark's JDBC writer vs the no-op sink; *rounds* queries of each, order
    reversed every other round, each query's first micro-batch dropped."""
    from ._bench_common import append, jdbc_options
    from ._noop import NOOP_FORMAT, NoopDataSource
    spark.dataSource.register(NoopDataSource)
    source = work / "micro-src"
    spark.range(batches * 1000, numPartitions=batches).selectExpr(*ROW_EXPRS).write.mode("overwrite").json(str(source))
    schema = spark.read.json(str(source)).schema
    jdbc = jdbc_options(url)
    out: dict[str, list[float]] = {}
    def run(name: str, table: str, start: Callable[[Any, str], Any]) -> None:
        create_table(url, table)
        stream = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(source))
                  .selectExpr("id", "payload", "amount", "cast(ts AS timestamp) AS ts"))
        query = start(stream.writeStream.trigger(availableNow=True)
                      .option("checkpointLocation", str(work / "micro-ck" / table)), table)
        query.awaitTermination()
        times = [float(p["durationMs"]["triggerExecution"]) for p in query.recentProgress
                 if p.get("numInputRows", 0) > 0]
        kept = times[1:] or times  # the first micro-batch pays the query's start
        out.setdefault(name, []).extend(kept)
        print(f"bench: micro-batch latency, {name:<42} median {statistics.median(kept):7.1f} ms "
              f"over {len(kept)} micro-batches", flush=True)
    plan: list[tuple[str, str, Callable[[Any, str], Any]]] = [
        (MICRO_NOOP, "bench_micro_noop", lambda w, _t: w.format(NOOP_FORMAT).start()),
        (MICRO_TWOPC, "bench_micro_twopc",
         lambda w, t: w.format("twopc-jdbc").options(**jdbc).option("dbtable", t).start()),
    ]
    if os.path.exists(JDBC_JAR):
        plan.append((MICRO_FOREACH, "bench_micro_spark", lambda w, t: w.foreachBatch(
            lambda d, _batch_id: append(d, "jdbc", t, jdbc)).start()))
    for r in range(max(1, rounds)):
        for name, table, start in (plan if r % 2 == 0 else plan[::-1]):
            run(name, f"{table}_{r}", start)
    return out


class _PreparedFloor:
    """Commits *n* prepared transactions of 10 rows without the protocol, on as many connections at
    once; :meth:`round` prepares them, then times their commit."""

    def __init__(self, dsn: str, table: str, n: int) -> None:
        import concurrent.futures

        import psycopg

        from twopc.sinks.postgres._commit_pipeline import MAX_PIPELINES, PER_PIPELINE
        self.table, self.n = table, n
        self.count = max(1, min(MAX_PIPELINES, -(-n // PER_PIPELINE)))
        self.workers = [psycopg.connect(dsn) for _ in range(min(n, 16))]
        self.committers = [psycopg.connect(dsn, autocommit=True) for _ in range(self.count)]
        self.pool = concurrent.futures.ThreadPoolExecutor(self.count)

    @staticmethod
    def _finish(conn: Any, gids: list[str]) -> None:
        with conn.pipeline():
            for gid in gids:
                conn.execute(f"COMMIT PREPARED '{gid}'")

    def round(self, r: int) -> float:
        gids = []
        for p in range(self.n):
            c = self.workers[p % len(self.workers)]
            copy_rows(c, self.table, 10)
            gids.append(f"floor-{self.n}-{r}-{p}")
            c.execute(f"PREPARE TRANSACTION '{gids[-1]}'")
        chunks = [gids[i::self.count] for i in range(self.count)]
        return timed(lambda: list(self.pool.map(self._finish, self.committers, chunks)))

    def close(self) -> None:
        self.pool.shutdown()
        for c in self.workers + self.committers:
            c.close()


#: the driver commit's phases bench_partitions times, in the order they run (``first``: the
#: batch's first ``COMMIT PREPARED``, alone before the others: the ``between_commits`` window)
_PHASES = ("decision", "first", "commits", "mark", "sweep")


def _time_phases(phases: dict[str, float], sink: Any, ledger: Any) -> None:
    """Make *sink* and *ledger* add to *phases* the time of the decision (``decision``), of a batch's first ``COMMIT
    PREPARED`` (``first``), of the others' pipelines (``commits``), of the mark (``mark``) and of the listing of
    prepared transactions (``sweep``)."""
    def timing(name: str | None, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            phase = name or ("commits" if "first" in phases else "first")
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                phases[phase] = phases.get(phase, 0.0) + time.perf_counter() - started
        return timed
    for obj, method, name in ((ledger, "record_decision", "decision"), (sink, "commit_all", None),
                              (ledger, "mark_committed", "mark"), (sink, "list_prepared", "sweep")):
        setattr(obj, method, timing(name, getattr(obj, method)))


def report_scaling(parts: dict[int, dict[str, float]], small: dict[str, list[float]],
                   micro: dict[str, list[float]]) -> None:
    """Print the rows of this module with their ratios and MET/MISSED verdicts."""
    from ._bench_results import record
    from .bench_summary import TARGETS, judge
    floor_goal, small_goal = TARGETS["partitions.commit_200_vs_floor"], TARGETS["small_write.dropin_vs_spark_jdbc"]
    if parts:
        print("\nprotocol cost per batch as the partition count grows (prepared mode, 10 rows per partition, "
              "median ms; the kinds of batch alternated round by round):")
        print(f"  {'partitions':>10}  {'driver commit':>13}  {'+ plan-time recovery':>20}  "
              f"{'plain commits, one by one':>25}  {'COMMIT PREPARED, no protocol':>28}  commit / floor")
        for n, row in parts.items():
            print(f"  {n:>10}  {row['commit']:13.2f}  {row['protocol']:20.2f}  {row['plain']:25.2f}  "
                  f"{row['floor']:28.2f}  {row['ratio']:6.2f}x")
        print("  the driver commit's phases (median ms): "
              + "; ".join(f"{n}: " + ", ".join(f"{k} {row[k]:.2f}" for k in _PHASES if k in row)
                          for n, row in parts.items()))
        hi = max(parts)
        row = parts[hi]
        print(f"  target: driver commit at {hi} partitions <= {floor_goal.goal:g}x committing the same {hi} prepared "
              f"transactions without the protocol: {row['commit']:.2f} / {row['floor']:.2f} ms, per round "
              f"{row['ratio']:.2f}x   {judge(floor_goal, row['ratio'])}")
        if hi == 200:
            record("partitions.commit_200_vs_floor", row["ratio"],
                   f"{row['commit']:.2f} / {row['floor']:.2f} ms (medians; the ratio: median of the rounds' own, "
                   f"alternated); decision {row.get('decision', 0):.2f}, commits {row.get('commits', 0):.2f}, mark "
                   f"{row.get('mark', 0):.2f}, sweep {row.get('sweep', 0):.2f} ms")
    if small:
        med = {k: statistics.median(v) for k, v in small.items()}
        peer, runs = med.get("spark jdbc"), max(len(v) for v in small.values())
        print(f"\nsmall write, {SMALL_ROWS:,} rows, median of {runs} (ratio = time / Spark JDBC's time):")
        for name, s in med.items():
            print(f"  {name:<40} {s:6.2f} s" + (f"   {s / peer:5.2f}x" if peer else ""))
        drop_in = med["twopc-jdbc drop-in (no checkpoint)"]
        if peer:
            print(f"  target: drop-in <= {small_goal.goal:g}x Spark's JDBC writer: {drop_in / peer:.2f}x   "
                  f"{judge(small_goal, drop_in / peer)}")
            record("small_write.dropin_vs_spark_jdbc", drop_in / peer,
                   f"{drop_in:.2f} s / {peer:.2f} s, median of {runs}")
    if micro:
        med = {k: statistics.median(v) for k, v in micro.items()}
        floor, peer = med.get(MICRO_NOOP), med.get(MICRO_FOREACH)
        print("\nmicro-batch latency, 1,000 rows per micro-batch (median triggerExecution; ratios: time / the "
              "no-op floor, time / foreachBatch):")
        for name, ms in med.items():
            print(f"  {name:<45} {ms:7.1f} ms" + (f"   {ms / floor:5.2f}x" if floor else "")
                  + (f"   {ms / peer:5.2f}x" if peer else ""))
        mine = med.get(MICRO_TWOPC)
        count = len(micro.get(MICRO_TWOPC, []))
        for key, other in (("micro_batch.twopc_vs_noop", floor), ("micro_batch.twopc_vs_foreach_batch", peer)):
            if mine is None or not other:
                continue
            target = TARGETS[key]
            if target.goal is not None:
                print(f"  target: {target.label} <= {target.goal:g}x: {mine / other:.2f}x   "
                      f"{judge(target, mine / other)}")
            record(key, mine / other, f"{mine:.1f} ms / {other:.1f} ms, median of {count} micro-batches")
