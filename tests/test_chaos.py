"""The crash matrix: a streaming query into PostgreSQL, in a subprocess, is killed at every
protocol edge (SIGKILL of driver, JVM and Python workers: no cleanup runs) and restarted
from the same checkpoint until its input is done. Then the table must hold every source
id exactly once, and ``pg_prepared_xacts`` nothing of the sink.

Executor points are also hit with ``kill`` (only the Python worker dies): Spark retries
the task, and the dead attempt's prepared transaction must not survive.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

import faultinject
from recovery import verify_postgres_ids
from recovery.demos.demo import create_table, write_input
from twopc import CommitLedger

from ._chaos_helpers import fired, run_job_until_done

pytestmark = pytest.mark.chaos

FILES, ROWS = 4, 40
DRIVER_POINTS = ["before_decision", "after_decision", "between_commits", "after_commit", "after_mark"]
EXECUTOR_POINTS = ["during_invoke", "before_pre_commit", "after_pre_commit"]


def _chaos(postgres_url: str, tmp_path: Path, plan: str, *, max_restarts: int = 4) -> faultinject.ChaosReport:
    table = f"chaos_{uuid.uuid4().hex[:10]}"
    create_table(postgres_url, table)
    ids = write_input(tmp_path / "in", FILES, ROWS)
    ck = tmp_path / "ck"
    report = run_job_until_done(
        ["recovery.demos.demo", "job", "--input", str(tmp_path / "in"), "--checkpoint", str(ck), "--table", table],
        {"TWOPC_DEMO_URL": postgres_url}, tmp_path / "faults", plan, max_restarts=max_restarts, timeout_s=900)
    engine = sa.create_engine(postgres_url)
    try:
        result = verify_postgres_ids(engine, table, ids, sink_id=CommitLedger(str(ck)).recorded_sink_id())
    finally:
        engine.dispose()
    assert result.ok, "\n" + result.render()
    assert CommitLedger(str(ck)).pending() == []
    return report


@pytest.mark.parametrize("point", EXECUTOR_POINTS + DRIVER_POINTS)
def test_job_crash_at_each_point_then_restart_is_exactly_once(postgres_url, tmp_path, point) -> None:
    report = _chaos(postgres_url, tmp_path, f"{point}@batch=1:crash")
    assert fired(report, point), report.summary()
    assert report.crashes == 1, report.summary()


def test_crash_inside_recovery_then_restart_is_exactly_once(postgres_url, tmp_path) -> None:
    report = _chaos(postgres_url, tmp_path, "after_decision@batch=1:crash,during_recovery:crash")
    assert fired(report, "after_decision") and fired(report, "during_recovery"), report.summary()
    assert report.crashes == 2, report.summary()


@pytest.mark.parametrize("point", EXECUTOR_POINTS)
def test_a_killed_task_attempt_is_retried_and_leaves_nothing_behind(postgres_url, tmp_path, point) -> None:
    report = _chaos(postgres_url, tmp_path, f"{point}@batch=1@partition=0:kill")
    assert fired(report, point), report.summary()
    assert report.crashes == 0 and len(report.runs) == 1, report.summary()
