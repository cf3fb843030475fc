"""The crash matrix applied to the Redis sink: a streaming query (``recovery.demos.redis_job``) in a
subprocess is SIGKILLed (driver, JVM and Python workers) at every protocol fault point and
restarted from its checkpoint until its input is done. Then every counter equals the number
of source rows, every row hash and stream entry is there once, and no staging is left.

To keep the file within about six minutes (a run costs ~30 s on two cores, mostly Spark
start-up), each test crashes one query at several points in turn (each at its own
micro-batch, or in protocol order within one), so every point of ``twopc.FAULT_POINTS`` is
crashed at in some test, and each test checks exactly-once at the end. Two ``kill`` rules
(one Python worker dies, Spark retries the task) ride along without costing a restart.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import faultinject
import twopc
from recovery.demos.demo import write_input
from recovery.demos.redis_job import ENV_URL, verify_redis
from twopc import CommitLedger

from ._chaos_helpers import fired, run_job_until_done

pytestmark = pytest.mark.chaos

FILES, ROWS = 4, 30

# Each plan crashes the whole job once per "crash" rule (a restart follows each), at its own
# batch or, within one batch, at points in protocol order; "kill" rules kill one Python
# worker only (Spark retries the task in the same run, the dead attempt's staging is swept).
PLANS = {
    "executor-and-driver": ["during_invoke@batch=0:crash", "after_decision@batch=1:crash",
                            "after_pre_commit@batch=2@partition=0:kill", "after_commit@batch=2:crash",
                            "before_pre_commit@batch=3:crash", "after_mark@batch=3:crash"],
    "prepare-commits-recovery": ["after_pre_commit@batch=0:crash", "during_recovery:crash",
                                 "before_decision@batch=1:crash", "between_commits@batch=2:crash",
                                 "during_invoke@batch=2@partition=1:kill", "after_decision@batch=3:crash"],
}


def _chaos(redis_url: str, tmp_path: Path, plan: str, *, max_restarts: int = 8) -> faultinject.ChaosReport:
    tag = f"chaos{uuid.uuid4().hex[:10]}"
    ids = write_input(tmp_path / "in", FILES, ROWS)
    ck = tmp_path / "ck"
    report = run_job_until_done(
        ["recovery.demos.redis_job", "job", "--input", str(tmp_path / "in"), "--checkpoint", str(ck), "--tag", tag],
        {ENV_URL: redis_url}, tmp_path / "faults", plan, max_restarts=max_restarts, timeout_s=600)
    result = verify_redis(redis_url, tag, ids, sink_id=CommitLedger(str(ck)).recorded_sink_id())
    assert result.ok, "\n" + result.render()
    assert CommitLedger(str(ck)).pending() == []
    return report


def test_the_plans_cover_every_fault_point() -> None:
    covered = {rule.split("@")[0].split(":")[0] for rules in PLANS.values() for rule in rules
               if rule.endswith(":crash")}
    assert covered == set(twopc.FAULT_POINTS)


@pytest.mark.parametrize("name", sorted(PLANS))
def test_job_crashed_at_every_fault_point_then_restarted_is_exactly_once(redis_url, tmp_path, name) -> None:
    rules = PLANS[name]
    report = _chaos(redis_url, tmp_path, ",".join(rules))
    for rule in rules:
        assert fired(report, rule.split("@")[0].split(":")[0]), f"{rule} did not fire\n{report.summary()}"
    assert report.crashes == sum(r.endswith(":crash") for r in rules), report.summary()
