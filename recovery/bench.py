"""``make bench``: twopc against its peers, in one run, on the same rows, as ratios.

Batch throughput (rows of bigint, text, double; ``local[2]``):

- ``twopc-postgres``: COPY from Arrow inside one prepared transaction per task, committed
  by the driver (exactly-once);
- Spark's built-in JDBC writer, ``batchsize=10000``, with and without
  ``reWriteBatchedInserts=true`` (at-least-once; needs Debian's ``libpostgresql-jdbc-java``,
  which ``make bench`` installs when it can);
- one raw ``COPY ... FROM STDIN`` of the same rows from a CSV file (single stream, no Spark).

Protocol cost per micro-batch: the median time of the driver's commit (ledger decision,
``COMMIT PREPARED`` per task, committed mark, orphan sweep) plus plan-time recovery,
against committing the same transactions without the protocol.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["main"]

JDBC_JAR = "/usr/share/java/postgresql.jar"


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _count(url: str, table: str) -> int:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            return int(c.execute(sa.text(f'SELECT count(*) FROM "{table}"')).scalar_one())
    finally:
        engine.dispose()


def _jdbc(url: str) -> tuple[str, dict[str, str]]:
    import sqlalchemy as sa

    u = sa.make_url(url)
    return f"jdbc:postgresql://{u.host}:{u.port}/{u.database}", {"user": u.username or "", "password": u.password or ""}


def bench_throughput(url: str, rows: int, work: Path) -> list[tuple[str, float]]:
    import psycopg
    import pyarrow.csv as pacsv
    import sqlalchemy as sa
    from pyspark.sql import SparkSession

    import sinks

    from .demo import create_table

    builder = (SparkSession.builder.master("local[2]").appName("twopc-bench")
               .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC"))
    have_jdbc = os.path.exists(JDBC_JAR)
    if have_jdbc:
        builder = builder.config("spark.jars", JDBC_JAR)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sinks.register_all(spark)
    df = spark.range(rows, numPartitions=2).selectExpr(
        "id", "concat('payload-', id) as payload", "cast(id as double) * 0.5 as amount").cache()
    df.count()
    results: list[tuple[str, float]] = []

    small = spark.range(20_000, numPartitions=2).selectExpr(
        "id", "concat('payload-', id) as payload", "cast(id as double) * 0.5 as amount")

    def run(name: str, table: str, write: Callable[[DataFrame, str, int], object]) -> None:
        """Warm up (JVM JIT, Python workers, connections) on a small write, then measure."""
        create_table(url, table + "_warm")
        write(small, table + "_warm", 1)
        create_table(url, table)
        seconds = _timed(lambda: write(df, table, 2))
        found = _count(url, table)
        if found != rows:
            raise SystemExit(f"bench: {name} wrote {found} rows, expected {rows}")
        results.append((name, rows / seconds))
        print(f"bench: {name:<44} {rows / seconds:>12,.0f} rows/s  ({seconds:.2f}s)", flush=True)

    run("twopc-postgres (prepared, exactly-once)", "bench_twopc", lambda d, t, v: (
        d.write.format("twopc-postgres").mode("append").option("url", url).option("dbtable", t)
        .option("checkpointLocation", str(work / "ck" / t)).option("txnVersion", str(v)).save()))
    if have_jdbc:
        jdbc_url, props = _jdbc(url)
        for name, extra in (("spark jdbc, batchsize 10000", ""),
                            ("spark jdbc, batchsize 10000, reWriteBatchedInserts", "?reWriteBatchedInserts=true")):
            def jdbc_write(d: DataFrame, t: str, _v: int, e: str = extra) -> None:
                (d.write.format("jdbc").mode("append").option("url", jdbc_url + e).option("dbtable", t)
                 .option("batchsize", "10000").option("driver", "org.postgresql.Driver")
                 .options(**props).save())

            run(name, "bench_jdbc" + ("_rw" if extra else ""), jdbc_write)
    else:
        print(f"bench: Spark's JDBC writer skipped: {JDBC_JAR} missing (apt-get install libpostgresql-jdbc-java)")
    csv = work / "rows.csv"
    pacsv.write_csv(df.toArrow(), csv, pacsv.WriteOptions(include_header=False))
    dsn = sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)

    def raw_copy(_df: DataFrame, table: str, _v: int) -> None:
        with psycopg.connect(dsn) as conn, conn.cursor() as cur:
            with cur.copy(f'COPY "{table}" (id, payload, amount) FROM STDIN (FORMAT csv)') as cp, \
                    open(csv, "rb") as f:
                while chunk := f.read(1 << 20):
                    cp.write(chunk)

    run("raw COPY from a CSV file (one stream, no Spark)", "bench_copy", raw_copy)
    spark.stop()
    return results


def bench_protocol(url: str, work: Path, batches: int) -> tuple[float, float]:
    """Median ms per micro-batch: with the protocol vs plain commits of the same writes."""
    import psycopg
    import pyarrow as pa
    import sqlalchemy as sa

    from sinks import PostgresSink
    from twopc import CommitCoordinator, CommitLedger, RecoveryCoordinator, TransactionContext

    from .demo import create_table

    create_table(url, "bench_proto")
    sink = PostgresSink(url, "bench_proto")
    sink.validate(pa.schema([("id", pa.int64()), ("payload", pa.string()), ("amount", pa.float64())]))
    ledger = CommitLedger(str(work / "proto-ck"))
    coord = CommitCoordinator(sink, ledger, "bench")
    data = pa.RecordBatch.from_pydict({"id": list(range(100)), "payload": ["x"] * 100, "amount": [0.5] * 100})
    with_protocol, without = [], []
    for b in range(batches):
        # Plan time (before the tasks): recovery; then the tasks; then the driver's commit.
        plan = _timed(lambda: RecoveryCoordinator(sink, ledger, sink_id="bench").run())
        handles = []
        for p in range(2):
            txn = sink.begin_transaction(TransactionContext("bench", b, p, b * 2 + p))
            sink.invoke_batch(txn, data)
            handles.append(sink.pre_commit(txn))
        with_protocol.append(plan + _timed(lambda: coord.commit_batch(b, handles)))
    dsn = sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    conns = [psycopg.connect(dsn) for _ in range(2)]
    for _b in range(batches):
        for c in conns:
            with c.cursor() as cur, cur.copy('COPY "bench_proto" (id, payload, amount) FROM STDIN') as cp:
                for i in range(100):
                    cp.write_row((i, "x", 0.5))

        def commit_all() -> None:
            for c in conns:
                c.commit()

        without.append(_timed(commit_all))
    for c in conns:
        c.close()
    sink.close()
    return statistics.median(with_protocol) * 1000, statistics.median(without) * 1000


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recovery.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("TWOPC_BENCH_POSTGRES_URL"))
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--batches", type=int, default=50, help="micro-batches for the protocol cost")
    args = parser.parse_args(argv)
    # SIGTERM runs the cleanup (stop the throwaway server) like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import faultinject

    server = None
    url = args.url
    with tempfile.TemporaryDirectory(prefix="twopc-bench-") as work:
        if url is None:
            server = faultinject.LocalPostgres().start()
            url = server.url
        try:
            results = bench_throughput(url, args.rows, Path(work))
            with_p, without = bench_protocol(url, Path(work), args.batches)
        finally:
            if server is not None:
                server.stop()
    twopc_rate = results[0][1]
    print(f"\nthroughput, {args.rows:,} rows (bigint, text, double), local[2]; ratio = twopc / writer")
    for name, rate in results:
        print(f"  {name:<50} {rate:>12,.0f} rows/s   twopc is {twopc_rate / rate:5.2f}x")
    print(f"\nprotocol cost per micro-batch (2 tasks, median of {args.batches}):")
    print(f"  with twopc (recovery check + decision + 2 COMMIT PREPARED + mark + sweep)  {with_p:6.2f} ms")
    print(f"  plain commits of the same 2 transactions                                  {without:6.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
