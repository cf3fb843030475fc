"""``make demo``: crash a streaming query into PostgreSQL again and again, then verify.

``python -m twopc.recovery.demos.demo`` runs a query of input files into ``twopc-postgres`` on a
throwaway server (or ``--url``) under a plan that SIGKILLs the whole job at random protocol points,
restarting it until the input is done, then prints the verification. ``... demo job`` is one run
(URL from ``TWOPC_DEMO_URL``; ``--format`` and ``--option key=value`` pick the writer)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ._bench_common import bench_main_setup, key_value, module_parser
from ._job import INPUT_SCHEMA, crashable_spark, run_stream_to_end

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter

__all__ = ["INPUT_SCHEMA", "create_table", "fault_plan", "main", "run_job", "write_input"]

CRASH_POINTS = ("during_invoke", "before_pre_commit", "after_pre_commit", "before_decision", "after_decision",
                "between_commits", "after_commit", "after_mark")


def write_input(folder: str | Path, files: int, rows_per_file: int, *, first_file: int = 0) -> list[int]:
    """Write *files* JSON-lines files of consecutive ids from file *first_file*; return the ids."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(first_file, first_file + files):
        rows = range(f * rows_per_file, (f + 1) * rows_per_file)
        tmp = folder / f".part-{f:05d}.json.tmp"
        tmp.write_text("".join(json.dumps({"id": i, "payload": f"event-{i}", "amount": i * 0.5}) + "\n" for i in rows))
        tmp.rename(folder / f"part-{f:05d}.json")
    return list(range(first_file * rows_per_file, (first_file + files) * rows_per_file))


def create_table(url: str, table: str) -> None:
    """(Re)create the demo table with a primary key on the source id, as a user's table has."""
    from ._bench_common import create_table as recreate
    recreate(url, table, "id bigint PRIMARY KEY, payload text, amount double precision")


def fault_plan(points: Sequence[str], batches: int, seed: int) -> str:
    """One crash at each of *points*, at distinct random batches (in order)."""
    rng = random.Random(seed)
    at = sorted(rng.sample(range(batches), min(len(points), batches)))
    return ",".join(f"{p}@batch={b}:crash" for p, b in zip(points, at, strict=False))  # fewer batches: fewer crashes


def run_job(input_dir: str, checkpoint: str, table: str, partitions: int, *, format_name: str, url: str | None,
            options: Mapping[str, str]) -> None:
    """One run of the query into *format_name*: all available input, then stop (*url* defaults to
    ``TWOPC_DEMO_URL``; *options* are extra writer options)."""
    url = url or os.environ.get("TWOPC_DEMO_URL")
    if not url:
        raise SystemExit("twopc.recovery.demos.demo job: give --url or set TWOPC_DEMO_URL")
    spark = crashable_spark("twopc-demo", partitions)
    def write(df: DataFrame) -> DataStreamWriter:
        return df.writeStream.format(format_name).option("url", url).option("dbtable", table).options(**options)
    run_stream_to_end(spark, input_dir, checkpoint, partitions, write)


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("demo", __doc__)
    sub = parser.add_subparsers(dest="command")
    job = sub.add_parser("job", help="one run of the streaming query (used by the chaos runner)")
    job.add_argument("--input", required=True)
    job.add_argument("--checkpoint", required=True)
    job.add_argument("--table", required=True)
    job.add_argument("--partitions", type=int, default=2)
    job.add_argument("--format", dest="format_name", default="twopc-postgres",
                     help="the sink's Spark format (default twopc-postgres)")
    job.add_argument("--option", dest="options", action="append", type=key_value, default=[],
                     metavar="KEY=VALUE", help="a writer option (repeatable), e.g. commitMode=staging")
    job.add_argument("--url", dest="job_url", default=None,
                     help="the sink's url option (default: $TWOPC_DEMO_URL, which keeps a password "
                          "off the command line)")
    parser.add_argument("--url", default=os.environ.get("TWOPC_DEMO_POSTGRES_URL"),
                        help="SQLAlchemy URL of a PostgreSQL with max_prepared_transactions > 0 "
                             "(default: start a throwaway one)")
    parser.add_argument("--files", type=int, default=8, help="input files = micro-batches")
    parser.add_argument("--rows", type=int, default=5000, help="rows per file")
    parser.add_argument("--crashes", type=int, default=5, help="how many times to kill the job")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    bench_main_setup()
    if args.command == "job":
        run_job(args.input, args.checkpoint, args.table, args.partitions, format_name=args.format_name,
                url=args.job_url, options=dict(args.options))
        return 0
    return _demo(args)


def _demo(args: argparse.Namespace) -> int:
    import sqlalchemy as sa

    from twopc import CommitLedger, faultinject
    from twopc.recovery import verify_postgres_ids
    seed = args.seed if args.seed is not None else random.randrange(10_000)
    rng = random.Random(seed)
    points = rng.sample(CRASH_POINTS, min(args.crashes, len(CRASH_POINTS)))
    url = args.url
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="twopc-demo-") as work, contextlib.ExitStack() as stack:
        if url is None:
            print("demo: starting a throwaway PostgreSQL (max_prepared_transactions=64) ...", flush=True)
            url = stack.enter_context(faultinject.LocalPostgres()).url
        table = "twopc_demo_events"
        create_table(url, table)
        ids = write_input(Path(work) / "input", args.files, args.rows)
        checkpoint = str(Path(work) / "checkpoint")
        plan = fault_plan(points, args.files, seed)
        print(f"demo: {len(ids)} rows in {args.files} micro-batches into table {table}")
        print(f"demo: fault plan (seed {seed}): {plan}")
        print("demo: each crash SIGKILLs driver, JVM and Python workers; the job is then restarted", flush=True)
        runner = faultinject.ChaosRunner(env={**os.environ, "TWOPC_DEMO_URL": url}, stdout=subprocess.DEVNULL)
        cmd = [sys.executable, "-m", "twopc.recovery.demos.demo", "job", "--input", str(Path(work) / "input"),
               "--checkpoint", checkpoint, "--table", table]
        def run_ended(run: faultinject.ChaosRun, fired: list[str]) -> None:
            what = "; ".join(line.split("firing ", 1)[-1] for line in fired) or "no fault fired"
            print(f"    run ended: {run.describe()} ({what})", flush=True)
        report = runner.run_until_done(cmd, plan, max_restarts=len(points) + 3, timeout_s=1200,
                                       on_progress=lambda line: print("   ", line, flush=True),
                                       on_run_end=run_ended)
        print(f"demo: {len(report.runs)} runs, {report.crashes} crashes, {time.monotonic() - started:.0f}s")
        engine = sa.create_engine(url)
        try:
            result = verify_postgres_ids(engine, table, ids, sink_id=CommitLedger(checkpoint).recorded_sink_id())
        finally:
            engine.dispose()
        print("verification:")
        print(result.render())
        if not report.completed:
            print("demo: the job did not complete:\n" + report.summary(), file=sys.stderr)
            return 1
        return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
