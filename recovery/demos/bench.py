"""``make bench``: twopc against its peers, in one run, on the same rows, as ratios.

Batch throughput of ``twopc-jdbc`` (prepared, drop-in, staging) against Spark's JDBC writer, a raw
CSV ``COPY``, the machine's limit (a raw binary ``COPY`` stream per task, also with ``PREPARE
TRANSACTION``) and a no-op Python data source; the protocol cost per micro-batch; the rows of
:mod:`twopc.recovery.demos.bench_scaling`. Method and targets: docs/development/benchmarks.md."""

from __future__ import annotations

import functools
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._bench_common import COLUMN_NAMES, JDBC_JAR, ROW_EXPRS, TABLE_COLUMNS, create_table, libpq_dsn, timed
from ._bench_results import record
from .bench_summary import TARGETS, judge

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["main"]


PREPARED = "twopc-jdbc prepared (exactly-once)"
DROPIN = "twopc-jdbc drop-in: no checkpoint, no commitMode (exactly-once)"
STAGING = "twopc-jdbc staging, no checkpoint (exactly-once)"
SPARK = "spark jdbc, batchsize 10000"
SPARK_RW = "spark jdbc, batchsize 10000, reWriteBatchedInserts"
COPY = "raw COPY of a CSV file (one stream, no Spark)"
PAR_COPY = "raw binary COPY, a stream per task (no Spark)"
PAR_COPY_PREPARED = "  the same + marker row + PREPARE, COMMIT PREPARED"
NOOP = "no-op Python data source (Spark's floor for a Python sink)"
WRITERS = {"prepared": PREPARED, "dropin": DROPIN, "staging": STAGING, "jdbc": SPARK, "jdbc-rw": SPARK_RW, "copy": COPY,
           "copy-par": PAR_COPY, "copy-par-prepared": PAR_COPY_PREPARED, "noop": NOOP}


def bench_throughput(url: str, rows: int, work: Path, *, repeat: int, writers: Sequence[str],
                     spark_conf: Sequence[tuple[str, str]], twopc_options: Sequence[tuple[str, str]],
                     partitions: Sequence[int], then: Callable[[SparkSession], None],
                     notes: dict[str, float]) -> dict[str, list[float]]:
    """rows/s of each writer, *repeat* interleaved rounds, at each count of *partitions* (the raw COPY
    at the first only). *spark_conf* goes to the session, *twopc_options* to the twopc-jdbc writers;
    *then* runs with the session before it stops; *notes* gets ``encode_seconds``, the CPU the COPY
    floor's rows took to encode (beforehand, out of its time)."""
    import psycopg
    import pyarrow.csv as pacsv

    from ._bench_common import append, bench_session, count_rows, jdbc_options
    have_jdbc = os.path.exists(JDBC_JAR)
    spark = bench_session("twopc-bench", [*([("spark.jars", JDBC_JAR)] if have_jdbc else []), *spark_conf])
    frames = {n: spark.range(rows, numPartitions=n).selectExpr(*ROW_EXPRS).cache() for n in partitions}
    for frame in frames.values():
        frame.count()
    df = frames[partitions[0]]
    small = spark.range(20_000, numPartitions=2).selectExpr(*ROW_EXPRS)
    jdbc = jdbc_options(url)
    results: dict[str, list[float]] = {}
    versions: dict[str, int] = {}
    def measure(name: str, table: str, write: Callable[[DataFrame, str, int], object], warm: bool,
                frame: DataFrame) -> None:  # the warm-up: JVM JIT, Python workers, connections
        if warm:
            create_table(url, table + "_warm")
            write(small, table + "_warm", 1)
        create_table(url, table)
        versions[table] = versions.get(table, 1) + 1
        seconds = timed(lambda: write(frame, table, versions[table]))
        found = rows if name.startswith(NOOP) else count_rows(url, table)[0]
        if found != rows:
            raise SystemExit(f"bench: {name} wrote {found} rows, expected {rows}")
        results.setdefault(name, []).append(rows / seconds)
        print(f"bench: {name:<50} {rows / seconds:>12,.0f} rows/s  ({seconds:.2f}s)", flush=True)
    def twopc_jdbc(mode: str | None) -> Callable[[DataFrame, str, int], object]:
        """*mode* None: the drop-in, Spark JDBC writer's options and nothing else."""
        def write(d: DataFrame, t: str, v: int) -> None:
            ck = {"checkpointLocation": str(work / "ck" / t), "txnVersion": str(v)} if mode == "prepared" else {}
            more = {} if mode is None else {"commitMode": mode, **dict(twopc_options), **ck}
            append(d, "twopc-jdbc", t, jdbc, **{"batchsize": "10000", **more})
        return write
    def spark_jdbc(extra: str) -> Callable[[DataFrame, str, int], object]:
        return lambda d, t, _v: append(d, "jdbc", t, jdbc, url=jdbc["url"] + extra, batchsize="10000")
    def noop(d: DataFrame, _t: str, _v: int) -> None:
        d.write.format(NOOP_FORMAT).mode("append").save()
    csv = work / "rows.csv"
    if "copy" in writers:
        pacsv.write_csv(df.toArrow(), csv, pacsv.WriteOptions(include_header=False))
    dsn = libpq_dsn(url)
    def raw_copy(_df: DataFrame, table: str, _v: int) -> None:
        with (psycopg.connect(dsn) as conn, conn.cursor() as cur,
              cur.copy(f'COPY "{table}" ({COLUMN_NAMES}) FROM STDIN (FORMAT csv)') as cp, open(csv, "rb") as f):
            while chunk := f.read(1 << 20):
                cp.write(chunk)
    streams = {id(frame): n for n, frame in frames.items()}
    wanted = {"copy-par", "copy-par-prepared"} & set(writers)
    floor = _ParallelCopy(dsn, df.toArrow(), max(partitions), streams) if wanted else None
    if floor is not None:
        print(f"bench: the parallel COPY floor's rows, encoded to COPY binary once beforehand: "
              f"{floor.encode_seconds:.2f} s of CPU ({floor.encode_seconds / rows * 1e6:.2f} us a row), "
              f"{floor.nbytes / 1e6:,.0f} MB", flush=True)
        notes["encode_seconds"] = floor.encode_seconds
    from ._noop import NOOP_FORMAT, NoopDataSource
    if "noop" in writers:
        spark.dataSource.register(NoopDataSource)
    writes: dict[str, tuple[str, Callable[[DataFrame, str, int], object]]] = {
        "prepared": ("bench_prepared", twopc_jdbc("prepared")), "dropin": ("bench_dropin", twopc_jdbc(None)),
        "staging": ("bench_staging", twopc_jdbc("staging")), "jdbc": ("bench_jdbc", spark_jdbc("")),
        "jdbc-rw": ("bench_jdbc_rw", spark_jdbc("?reWriteBatchedInserts=true")), "copy": ("bench_copy", raw_copy),
        "noop": ("bench_noop", noop)}
    if floor is not None:
        writes["copy-par"] = ("bench_copy_par", functools.partial(floor.write, prepared=False))
        writes["copy-par-prepared"] = ("bench_copy_par_prep", functools.partial(floor.write, prepared=True))
    plan = []
    for key in writers:
        if key in ("jdbc", "jdbc-rw") and not have_jdbc:
            print(f"bench: {WRITERS[key]} skipped: {JDBC_JAR} missing (apt-get install libpostgresql-jdbc-java)")
        elif key in writes:
            plan.append((WRITERS[key], *writes[key]))
    for r in range(repeat):
        if repeat > 1:
            print(f"bench: round {r + 1} of {repeat}", flush=True)
        for n in partitions:
            for name, table, write in plan:
                if n != partitions[0] and write is raw_copy:
                    continue
                label = name if n == partitions[0] else f"{name}, {n} partitions"
                measure(label, f"{table}_{n}", write, warm=r == 0, frame=frames[n])
    then(spark)
    if floor is not None:
        floor.pool.shutdown()
    spark.stop()
    return results


class _ParallelCopy:
    """The machine's limit for a write by *slices* tasks: a raw binary ``COPY`` stream per task, at once, each in a
    transaction of its own, on bytes twopc's encoder made beforehand (:attr:`encode_seconds`); with ``prepared`` each
    stream adds a marker row and ``PREPARE TRANSACTION``, committed with ``COMMIT PREPARED`` once all prepared."""

    def __init__(self, dsn: str, table: Any, slices: int, streams: dict[int, int]) -> None:
        import concurrent.futures

        import psycopg
        from psycopg import sql

        from twopc.sinks.postgres._binary import encode_binary
        from twopc.sinks.postgres._columns import assign, normalize_array
        from twopc.sinks.postgres._copy import CopyStream
        from twopc.sinks.sql._names import TableName
        self.dsn, self.slices, self.streams = dsn, slices, streams
        probe = "bench_copy_par_probe"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{probe}"')
            conn.execute(f'CREATE TABLE "{probe}" ({TABLE_COLUMNS})')
            copy_plan = CopyStream(conn, TableName(None, probe)).plan_for(table.schema, "binary")
            conn.execute(f'DROP TABLE "{probe}"')
        started = time.process_time()
        self.bodies: list[list[bytes]] = []
        rows = table.num_rows
        for i in range(slices):
            part = table.slice(i * rows // slices, (i + 1) * rows // slices - i * rows // slices).combine_chunks()
            arrays = [assign(name, normalize_array(part.column(name)), col)
                      for name, col in zip(part.schema.names, copy_plan.columns, strict=True)]
            self.bodies.append([bytes(c) for c in encode_binary(arrays, part.schema.names, copy_plan.columns)])
        self.encode_seconds = time.process_time() - started
        self.nbytes = sum(len(c) for body in self.bodies for c in body)
        self.columns = sql.SQL(", ").join(sql.Identifier(c.name) for c in copy_plan.columns)
        self.pool = concurrent.futures.ThreadPoolExecutor(slices)

    def write(self, frame: Any, table: str, _version: int, *, prepared: bool) -> None:
        """The floor's write into *table*, a stream per partition of *frame* (*streams* by frame id; warm-up: 2)."""
        import psycopg
        from psycopg import sql

        from twopc.sinks.postgres._binary import BINARY_HEADER, BINARY_TRAILER
        n = self.streams.get(id(frame), 2)
        groups = [[c for body in self.bodies[i * self.slices // n:(i + 1) * self.slices // n] for c in body]
                  for i in range(n)]
        conns = [psycopg.connect(self.dsn) for _ in range(n)]
        if prepared:
            conns[0].execute('CREATE TABLE IF NOT EXISTS "bench_copy_par_markers" (gid text PRIMARY KEY)')
            conns[0].commit()
        stmt = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT binary)").format(sql.Identifier(table), self.columns)
        def stream(i: int) -> str:
            conn = conns[i]
            with conn.cursor() as cur, cur.copy(stmt) as copy:
                copy.write(BINARY_HEADER)
                for chunk in groups[i]:
                    copy.write(chunk)
                copy.write(BINARY_TRAILER)
            if not prepared:
                conn.commit()
                return ""
            gid = f"bench-floor-{table}-{time.time_ns()}-{i}"
            conn.execute('INSERT INTO "bench_copy_par_markers" (gid) VALUES (%s)', (gid,))
            conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
            return gid
        try:
            gids = list(self.pool.map(stream, range(n)))
            if prepared:
                with psycopg.connect(self.dsn, autocommit=True) as committer, committer.pipeline():
                    for gid in gids:
                        committer.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(gid)))
        finally:
            for c in conns:
                c.close()


def bench_protocol(url: str, work: Path, batches: int) -> dict[str, float]:
    """Median ms per micro-batch: with the protocol (prepared and staging modes) vs plain commits of the same writes."""
    import psycopg
    import pyarrow as pa

    from twopc import CommitCoordinator, CommitLedger, RecoveryCoordinator, TransactionContext
    from twopc.sinks import PostgresSink, StagingSink

    from ._bench_common import commit_each, copy_rows
    schema = pa.schema([("id", pa.int64()), ("payload", pa.string()), ("amount", pa.float64()),
                        ("ts", pa.timestamp("us", "UTC"))])
    data = pa.RecordBatch.from_pydict({"id": list(range(100)), "payload": ["x"] * 100, "amount": [0.5] * 100,
                                       "ts": [1_767_225_600_000_000] * 100}, schema=schema)
    out: dict[str, float] = {}
    def protocol(sink: Any, name: str) -> float:
        sink.validate(schema)
        ledger = CommitLedger(str(work / f"proto-ck-{name}"))
        coord = CommitCoordinator(sink, ledger, "bench")
        timings = []
        for b in range(batches):
            # Plan time (before the tasks): recovery; then the tasks; then the driver's commit.
            plan = timed(lambda: RecoveryCoordinator(sink, ledger, sink_id="bench").run())
            handles = []
            for p in range(2):
                txn = sink.begin_transaction(TransactionContext("bench", b, p, b * 2 + p))
                sink.invoke_batch(txn, data)
                handles.append(sink.pre_commit(txn))
            timings.append(plan + timed(functools.partial(coord.commit_batch, b, handles)))
        sink.close()
        return statistics.median(timings) * 1000
    create_table(url, "bench_proto")
    out["prepared"] = protocol(PostgresSink(url, "bench_proto"), "prepared")
    create_table(url, "bench_proto_staging")
    out["staging"] = protocol(StagingSink(url, "bench_proto_staging"), "staging")
    conns = [psycopg.connect(libpq_dsn(url)) for _ in range(2)]
    without = []
    for _b in range(batches):
        for c in conns:
            copy_rows(c, "bench_proto", 100)
        without.append(timed(functools.partial(commit_each, conns)))
    for c in conns:
        c.close()
    out["plain"] = statistics.median(without) * 1000
    return out


def report(results: dict[str, list[float]], rows: int, settings: Sequence[str], notes: dict[str, float]) -> None:
    """The ratio table and the targets: medians over the rounds and, with several, each writer's
    range and each round's own ratio (its writers ran back to back: the least disturbed ratio)."""
    med = {name: statistics.median(rates) for name, rates in results.items()}
    rounds = max((len(r) for r in results.values()), default=0)
    print(f"\nthroughput, {rows:,} rows (bigint, text, double, timestamptz), local[2], "
          f"{'median of ' + str(rounds) + ' rounds' if rounds > 1 else 'one round'}; ratio = prepared / writer"
          + (f"\n  non-default settings: {', '.join(settings)}" if settings else ""))
    base = med.get(PREPARED)
    for name, rates in results.items():
        spread = f"   [{min(rates):,.0f} .. {max(rates):,.0f}]" if len(rates) > 1 else ""
        m = re.search(r", \d+ partitions$", name)
        same = med.get(PREPARED + m.group(0)) if m else base  # prepared at the same partition count
        ratio = f"prepared is {same / med[name]:5.2f}x" if same else ""
        print(f"  {name:<50} {med[name]:>12,.0f} rows/s   {ratio}{spread}")
    print("\ntargets (exactly-once writers against their peers):")
    for key, label, name, peers in (
            ("throughput.prepared_vs_spark", "prepared vs best Spark JDBC      ", PREPARED, (SPARK, SPARK_RW)),
            ("throughput.prepared_vs_copy", "prepared vs raw COPY             ", PREPARED, (COPY,)),
            ("throughput.dropin_vs_spark_rw", "drop-in vs Spark JDBC, rewritten ", DROPIN, (SPARK_RW,)),
            ("throughput.dropin_vs_copy", "drop-in vs raw COPY              ", DROPIN, (COPY,)),
            ("throughput.prepared_vs_parallel_copy", "prepared vs parallel binary COPY ", PREPARED, (PAR_COPY,)),
            ("throughput.dropin_vs_parallel_copy", "drop-in vs parallel binary COPY  ", DROPIN, (PAR_COPY,)),
            ("throughput.noop_vs_parallel_copy", "no-op Python source vs the same  ", NOOP, (PAR_COPY,))):
        mine, others = results.get(name), [results[n] for n in peers if n in results]
        if not others or not mine:
            print(f"  {label}: not measured")
            continue
        best = max(statistics.median(o) for o in others)
        r = statistics.median(mine) / best
        per_round = [p / max(o[i] for o in others) for i, p in enumerate(mine) if all(i < len(o) for o in others)]
        rounds_text = f"   (per round: {', '.join(f'{x:.2f}x' for x in per_round)})" if len(per_round) > 1 else ""
        goal = TARGETS[key].goal
        print(f"  {label}{'' if goal is None else f' >= {goal}x'}: {statistics.median(mine):,.0f} / {best:,.0f} = "
              f"{r:.2f}x   {judge(TARGETS[key], r)}{rounds_text}")
        record(key, r, f"{statistics.median(mine):,.0f} / {best:,.0f} rows/s, {rows:,} rows, "
                       f"median of {len(mine)} rounds")
    if PAR_COPY in results and PAR_COPY_PREPARED in results:
        floor, floor_prepared = statistics.median(results[PAR_COPY]), statistics.median(results[PAR_COPY_PREPARED])
        print("\nwhere the time between the parallel binary COPY floor and prepared mode goes (seconds for "
              f"{rows:,} rows, medians):")
        print(f"  the floor, plain transactions                           {rows / floor:6.2f} s")
        added = rows / floor_prepared - rows / floor
        print(f"  + marker row, PREPARE TRANSACTION, COMMIT PREPARED      {added:+6.2f} s")
        if "encode_seconds" in notes:
            print(f"  Arrow-to-binary encoding (CPU, twopc's encoder; in the tasks, beside the server's parsing on "
                  f"the same cores)  {notes['encode_seconds']:.2f} s")
        if NOOP in results:
            spark_alone = rows / statistics.median(results[NOOP])
            print(f"  Spark alone: a no-op Python data source on the same rows (the JVM's rows to Arrow, to the "
                  f"Python workers; on the same 2 cores as the server)  {spark_alone:.2f} s")
        if PREPARED in results:
            rest = rows / statistics.median(results[PREPARED]) - rows / floor_prepared
            print(f"  prepared mode over the floor with PREPARE: encoding, Spark's tasks and Arrow transfer, the "
                  f"plan, the fence records, the driver's commit  {rest:+6.2f} s")


def main(argv: Sequence[str] | None = None) -> int:
    from ._bench_common import bench_main_setup, key_value, module_parser, server_url
    parser = module_parser("bench", __doc__)
    parser.add_argument("--url", default=os.environ.get("TWOPC_BENCH_POSTGRES_URL"))
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3,
                        help="rounds of every writer, interleaved (the table shows medians; default 3)")
    parser.add_argument("--writers", default=",".join(WRITERS), help=f"comma-separated subset of {', '.join(WRITERS)}")
    parser.add_argument("--batches", type=int, default=50, help="micro-batches for the protocol cost (0: skip)")
    parser.add_argument("--partitions", default="2,16",
                        help="partition counts of the throughput rows (comma-separated; default 2,16)")
    parser.add_argument("--scaling", default="partitions,small,micro",
                        help="fixed-cost rows to run: partitions (protocol cost at 2..200 partitions), small "
                             "(a 20k-row write), micro (micro-batch latency); comma-separated, '' for none")
    parser.add_argument("--conf", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                        help="extra Spark configuration, for every writer (experiments; repeatable)")
    parser.add_argument("--option", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                        help="extra option of the twopc-jdbc writers, e.g. copyFormat=csv (repeatable)")
    args = parser.parse_args(argv)
    writers = [w.strip() for w in args.writers.split(",") if w.strip()]
    unknown = [w for w in writers if w not in WRITERS]
    if unknown:
        parser.error(f"unknown writers {unknown}: choose from {', '.join(WRITERS)}")
    bench_main_setup()
    from twopc import faultinject

    from .bench_scaling import PARTITIONS, bench_micro_batches, bench_partitions, bench_small_write, report_scaling
    proto: dict[str, float] = {}
    scaling = {s.strip() for s in args.scaling.split(",") if s.strip()}
    parts: dict[int, dict[str, float]] = {}
    small: dict[str, list[float]] = {}
    micro: dict[str, list[float]] = {}
    notes: dict[str, float] = {}
    # room for the 200-partition batches of the protocol-cost rows
    throwaway = functools.partial(faultinject.LocalPostgres, max_prepared_transactions=2 * max(PARTITIONS))
    with tempfile.TemporaryDirectory(prefix="twopc-bench-") as work, server_url(args.url, throwaway) as url:
        def then(spark: SparkSession) -> None:
            if "small" in scaling:
                small.update(bench_small_write(spark, url, Path(work), max(3, args.repeat)))
            if "micro" in scaling:
                micro.update(bench_micro_batches(spark, url, Path(work), 12, rounds=4))
        results = bench_throughput(url, args.rows, Path(work), repeat=max(1, args.repeat), writers=writers,
                                   spark_conf=args.conf, twopc_options=args.option,
                                   partitions=[int(p) for p in args.partitions.split(",") if p.strip()],
                                   then=then, notes=notes)
        if args.batches > 0:
            proto = bench_protocol(url, Path(work), args.batches)
            if "partitions" in scaling:
                parts = bench_partitions(url, Path(work), args.batches)
    report(results, args.rows, [f"--conf {k}={v}" for k, v in args.conf]
           + [f"--option {k}={v}" for k, v in args.option], notes)
    if proto:
        print(f"\nprotocol cost per micro-batch (2 tasks, median of {args.batches}; target <= "
              f"{TARGETS['protocol.prepared_ms'].goal:g} ms):")
        for mode, what in (("prepared", "prepared: recovery check + decision + 2 COMMIT PREPARED + mark + sweep"),
                           ("staging", "staging:  recovery check + one moving transaction + decision + mark  ")):
            print(f"  {what}  {proto[mode]:6.2f} ms   {judge(TARGETS[f'protocol.{mode}_ms'], proto[mode])}")
            record(f"protocol.{mode}_ms", proto[mode], f"median of {args.batches} micro-batches; plain commits "
                                                       f"{proto['plain']:.2f} ms")
        print(f"  plain commits of the same 2 transactions                                {proto['plain']:6.2f} ms")
    report_scaling(parts, small, micro)
    return 0


if __name__ == "__main__":
    sys.exit(main())
