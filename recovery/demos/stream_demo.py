"""``make demo``: producers -> Redis Streams -> Spark -> PostgreSQL + Redis counters, under crashes.

While producers append, the job of :mod:`twopc.recovery.demos.pipeline` is SIGKILLed at protocol
points in random micro-batches (both edges of the source's acknowledgement included, and Redis
once too) and restarted until every entry is consumed; then the verification table and verdict.
About three minutes on two cores."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from ._bench_common import bench_main_setup, module_parser

__all__ = ["main"]

POINTS = ("during_invoke", "after_pre_commit", "after_decision", "after_commit", "after_mark")


def _plan(rng: random.Random, crashes: int, batches: int) -> str:
    points = rng.sample(POINTS, min(crashes, len(POINTS)))
    at = sorted(rng.sample(range(1, batches), len(points)))
    return ",".join([f"{p}@batch={b}:crash" for p, b in zip(points, at, strict=True)]
                    + ["stream_before_ack:crash", "stream_after_ack:crash"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("stream_demo", __doc__)
    parser.add_argument("--entries", type=int, default=6000, help="entries the producers append")
    parser.add_argument("--rate", type=float, default=80.0, help="entries per second")
    parser.add_argument("--crashes", type=int, default=4, help="job crashes at sink protocol points")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    bench_main_setup()
    from twopc import faultinject

    from .pipeline import PipelineSpec, create_table, produce, verify, write_spec
    seed = args.seed if args.seed is not None else random.randrange(10_000)
    rng = random.Random(seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="twopc-stream-demo-") as work:
        print("demo: starting a throwaway PostgreSQL and Redis (appendonly yes, appendfsync always) ...", flush=True)
        with faultinject.LocalPostgres() as pg, faultinject.LocalRedis() as rs:
            spec = PipelineSpec(rs.url, pg.url, ["demo:orders:0", "demo:orders:1"], "twopc_demo_orders",
                                str(Path(work) / "checkpoints"), max_per_trigger=400)
            create_table(pg.url, spec.table)
            spec_path = Path(work) / "spec.json"
            write_spec(spec, spec_path)
            plan = _plan(rng, args.crashes, max(6, args.entries // spec.max_per_trigger // 2))
            print(f"demo: {args.entries} entries at {args.rate:.0f}/s into streams {', '.join(spec.streams)}")
            print(f"demo: fault plan (seed {seed}): {plan}; Redis is SIGKILLed once at the first "
                  f"stream_before_ack crash", flush=True)
            done = threading.Event()
            def producer() -> None:
                produce(rs.url, spec.streams, args.entries, rate=args.rate)
                done.set()
            threading.Thread(target=producer, name="producer", daemon=True).start()
            killed_redis: list[bool] = []
            def run_ended(run: faultinject.ChaosRun, fired: list[str]) -> None:
                what = "; ".join(line.split("firing ", 1)[-1] for line in fired) or "no fault fired"
                print(f"    run ended: {run.describe()} ({what})", flush=True)
                if not killed_redis and any(" stream_before_ack " in line for line in fired):
                    print("    SIGKILL redis-server, restart it from its AOF", flush=True)
                    rs.kill()
                    rs.start()
                    killed_redis.append(True)
            runner = faultinject.ChaosRunner(env=dict(os.environ), state_dir=Path(work) / "faults",
                                             stdout=subprocess.DEVNULL, tail_lines=60)
            cmd = [sys.executable, "-m", "twopc.recovery.demos.pipeline", "job", str(spec_path)]
            rounds, report = 0, None
            while True:
                finished = done.is_set()
                rounds += 1
                print(f"demo: job round {rounds} ({'producers done' if finished else 'producers running'}) ...",
                      flush=True)
                report = runner.run_until_done(cmd, plan, max_restarts=10, timeout_s=900,
                                               on_progress=lambda line: print("   ", line, flush=True),
                                               on_run_end=run_ended)
                if not report.completed:
                    print("demo: the job did not complete:\n" + report.summary(), file=sys.stderr)
                    print(report.runs[-1].stderr_tail, file=sys.stderr)
                    return 1
                if finished:
                    break
            print(f"demo: {rounds} rounds, {len(report.fired)} faults fired, {time.monotonic() - started:.0f}s")
            verdict = verify(spec)
            print("verification:")
            print(verdict.render())
            return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
