"""``python -m twopc.recovery.demos.bench_first_write``: what a short job's first write costs, whole
processes, in one run, as ratios.

Each run is a fresh process (:mod:`twopc.recovery.demos._first_write_child`) that starts a session,
writes 100 rows and exits: the no-op Python data source, Spark's JDBC writer and the ``twopc-jdbc``
drop-in, alternated, each warmed up once, twopc compiled first as an install does. A throwaway
PostgreSQL unless ``TWOPC_BENCH_POSTGRES_URL`` is set."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ._bench_common import JDBC_JAR, ROW_EXPRS, compile_package, count_rows, create_table, jdbc_options
from ._bench_results import record
from .bench_summary import TARGETS, judge

__all__ = ["main"]

ROWS = 100
CHILD = Path(__file__).with_name("_first_write_child.py")
NOOP, SPARK, TWOPC = "noop", "spark-jdbc", "twopc"
LABELS = {NOOP: "no-op Python data source (Spark's floor)", SPARK: "Spark's JDBC writer (at-least-once)",
          TWOPC: "twopc-jdbc drop-in (exactly-once)"}
TABLES = {SPARK: "bench_first_write_jdbc", TWOPC: "bench_first_write_twopc"}


def run_once(variant: str, url: str) -> dict[str, float]:
    """One process: its whole time (``total``) and the child's own times, in seconds."""
    params = {"jdbc": jdbc_options(url), "table": TABLES.get(variant, ""), "rows": ROWS,
              "exprs": list(ROW_EXPRS), "jar": JDBC_JAR if os.path.exists(JDBC_JAR) else ""}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(CHILD), variant], input=json.dumps(params), capture_output=True,
                          text=True, check=False)
    total = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"bench: the {variant} run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    times: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return {"total": total, **times}


def bench(url: str, runs: int, warm: int, variants: Sequence[str]) -> dict[str, list[dict[str, float]]]:
    for table in TABLES.values():
        create_table(url, table)
    compile_package()
    for _ in range(warm):
        for v in variants:
            run_once(v, url)
    out: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    for r in range(runs):
        for v in (variants if r % 2 == 0 else list(reversed(variants))):  # alternate the order too
            t = run_once(v, url)
            out[v].append(t)
            print(f"bench: first write, run {r + 1}, {LABELS[v]:<42} {t['total']:6.2f} s "
                  f"(session {t['ready']:.2f}, write {t['write']:.2f}, stop {t['stop']:.2f}; load "
                  f"{os.getloadavg()[0]:.2f})", flush=True)
    for v in variants:
        if v in TABLES:
            found, expected = count_rows(url, TABLES[v])[0], ROWS * (runs + warm)
            if found != expected:
                raise SystemExit(f"bench: {LABELS[v]} left {found} rows in {TABLES[v]}, expected {expected}")
    return out


def report(results: dict[str, list[dict[str, float]]]) -> None:
    def med(v: str, part: str) -> float:
        return statistics.median(t[part] for t in results[v])
    runs = min(len(r) for r in results.values())
    print(f"\nfirst write of a process, {ROWS} rows, local[2], median of {runs} runs each (seconds):")
    print(f"  {'writer':<42} {'whole process':>13} {'session start':>13} {'write':>7} {'stop':>6}")
    for v in results:
        print(f"  {LABELS[v]:<42} {med(v, 'total'):13.2f} {med(v, 'ready'):13.2f} {med(v, 'write'):7.2f} "
              f"{med(v, 'stop'):6.2f}")
    for peer, key in ((NOOP, "first_write.twopc_vs_noop"), (SPARK, "first_write.twopc_vs_spark_jdbc")):
        if TWOPC not in results or peer not in results:
            continue
        ratio = med(TWOPC, "total") / med(peer, "total")
        write_ratio = med(TWOPC, "write") / med(peer, "write")
        per_run = [a["total"] / b["total"] for a, b in zip(results[TWOPC], results[peer], strict=False)]
        target = TARGETS[key]
        goal = f"target <= {target.goal:g}x: {judge(target, ratio)}" if target.goal is not None else "no target"
        print(f"  twopc / {peer:<10} whole process {ratio:5.2f}x, write alone {write_ratio:5.2f}x   {goal}   "
              f"(per run: {', '.join(f'{x:.2f}x' for x in per_run)})")
        record(key, ratio, f"whole process {med(TWOPC, 'total'):.2f} s / {med(peer, 'total'):.2f} s, "
                           f"write alone {write_ratio:.2f}x; median of {runs} runs each")
        if peer == NOOP:
            record("first_write.write_vs_noop", write_ratio,
                   f"{med(TWOPC, 'write'):.2f} s / {med(peer, 'write'):.2f} s; median of {runs} runs each")


def main(argv: Sequence[str] | None = None) -> int:
    from ._bench_common import bench_main_setup, module_parser, server_url
    parser = module_parser("bench_first_write", __doc__)
    parser.add_argument("--runs", type=int, default=5, help="measured runs of each writer, alternated (default 5)")
    parser.add_argument("--warm", type=int, default=1, help="unmeasured runs of each writer first (default 1)")
    args = parser.parse_args(argv)
    bench_main_setup()
    variants = [NOOP, TWOPC] + ([SPARK] if os.path.exists(JDBC_JAR) else [])
    if SPARK not in variants:
        print(f"bench: {LABELS[SPARK]} skipped: {JDBC_JAR} missing (apt-get install libpostgresql-jdbc-java)")
    from twopc.faultinject import LocalPostgres
    with server_url(os.environ.get("TWOPC_BENCH_POSTGRES_URL"), LocalPostgres) as url:
        results = bench(url, max(1, args.runs), max(0, args.warm), variants)
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
