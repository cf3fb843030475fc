"""The crash matrix over the Redis Stream pipeline (``twopc.recovery.demos.pipeline``): two
streams -> ``twopc-redis-stream`` -> ``twopc-postgres`` and ``twopc-redis`` counters on the
same Redis, SIGKILLed (driver, JVM, Python workers) at representative points of every
edge, and Redis itself SIGKILLed (restarted from its AOF) between a sink commit and the
acknowledgement. Then every entry is a row exactly once, every counter is exact, nothing
is pending or lagging in either group and nothing is left prepared.

Which points, and why not all of ``twopc.testing.FAULT_POINTS``: the sinks' own protocol points
are each crashed by the kit's matrix (``test_kit_chaos.py``); here every point where the
*source* state differs is taken once: the range is recorded but the batch not written
(``during_invoke``, ``after_pre_commit``), decided but not committed (``after_decision``:
the replay reads the same range while recovery commits), committed but Spark's commit
log not written (``after_commit``, ``after_mark``: the batch replays with the same id and
its entries must not be applied twice), and both edges of the acknowledgement
(``stream_before_ack``, ``stream_after_ack``). ``before_pre_commit``, ``before_decision``,
``between_commits`` and ``during_recovery`` leave the source in the same state as a
neighbour above; each costs a Spark start (~20 s on two cores).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from twopc import faultinject
from twopc.recovery.demos.pipeline import PipelineSpec, create_table, produce, verify, write_spec

pytestmark = pytest.mark.chaos

PLAN = ["during_invoke@batch=0:crash", "after_pre_commit@batch=1:crash", "after_decision@batch=2:crash",
        "after_commit@batch=3:crash", "after_mark@batch=4:crash", "stream_before_ack:crash*2",
        "stream_after_ack:crash"]


def test_pipeline_is_exactly_once_under_crashes_of_the_job_and_of_redis(postgres_url: str, tmp_path: Path) -> None:
    redis = faultinject.LocalRedis().start()
    try:
        spec = PipelineSpec(redis.url, postgres_url, ["chaos:a", "chaos:b"], "twopc_stream_chaos",
                            str(tmp_path / "ck"), max_per_trigger=20)
        create_table(postgres_url, spec.table)
        assert produce(redis.url, spec.streams, 150) == 150
        write_spec(spec, tmp_path / "spec.json")
        redis_kills: list[str] = []

        def run_ended(run: faultinject.ChaosRun, fired: list[str]) -> None:
            # the first stream_before_ack crash: SIGKILL Redis too, between the sink's
            # commit and the acknowledgement, and restart it from its AOF
            if not redis_kills and any(" stream_before_ack " in line for line in fired):
                redis.kill()
                redis.start()
                redis_kills.append(run.describe())

        runner = faultinject.ChaosRunner(env={**os.environ, "PYSPARK_PYTHON": sys.executable,
                                              "PYSPARK_DRIVER_PYTHON": sys.executable},
                                         cwd=tmp_path, state_dir=tmp_path / "faults", tail_lines=400)
        report = runner.run_until_done([sys.executable, "-m", "twopc.recovery.demos.pipeline", "job",
                                        str(tmp_path / "spec.json")], ",".join(PLAN), max_restarts=25,
                                       timeout_s=1500, on_run_end=run_ended)
        tail = report.runs[-1].stderr_tail[-3000:]
        assert report.completed, f"{report.summary()}\n{tail}"
        fired = " ".join(report.fired)
        assert all(f" {p.split('@')[0].split(':')[0]} " in fired for p in PLAN), report.fired
        failed = "\n".join(f"--- run {i}: {r.describe()}\n" + "\n".join(
            line[:600] for line in r.stderr_tail.splitlines() if "Error" in line or "Exception" in line
            or "twopc" in line)
            for i, r in enumerate(report.runs, 1) if r.returncode not in (0, -9))
        # Every planned point fired (above) and Redis was killed once. No run may end with
        # java.io.OptionalDataException in ResultTask.runTask: PySpark races on the environment
        # map that every function of one registered Python data source shares, and
        # twopc.register pre-sets the keys the source runner inserts (twopc/spark/_source_env.py), so
        # two queries on one source never damage each other's task binaries. A run may still
        # end on its own for another reason (on a machine loaded far beyond its cores, Spark's
        # source runner worker can miss its 10 s connect-back window); the runner starts the job
        # again and the verdict below must hold whatever the number of runs. The failed runs'
        # exception lines are in the message.
        damaged = [i for i, r in enumerate(report.runs, 1) if "OptionalDataException" in r.stderr_tail]
        assert not damaged, (f"runs {damaged} could not deserialize their tasks", report.summary(), failed)
        assert report.crashes >= len(PLAN) - 1 and redis_kills, (report.summary(), redis_kills, failed)
        verdict = verify(spec)
        assert verdict.produced == 150
        assert verdict.ok, verdict.render()
    finally:
        redis.stop()
