"""``twopc recover``: inspect and run recovery by hand, as an operator would."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from twopc import CommitCoordinator, CommitLedger
from twopc.sinks import FileSink
from twopc.spi.operations import BatchState

from tests._filesink_helpers import committed_ids, crash_commit, run_task
from tests._paths import REPO_ROOT

REPO = REPO_ROOT


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "twopc.recovery", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ})


@pytest.fixture
def crashed(tmp_path):
    """A driver that died after recording batch 0's decision, plus an orphan of batch 1."""
    sink = FileSink(str(tmp_path / "out"))
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_sink_id(None, default="job1")
    handles = [run_task(sink, "job1", 0, p, p, [p]) for p in range(2)]
    crash_commit(CommitCoordinator(sink, ledger, "job1"), "after_decision", 0, handles, tmp_path / "f")
    run_task(sink, "job1", 1, 0, 9, [100])
    return sink, ledger, tmp_path


def test_dry_run_reports_and_changes_nothing(crashed) -> None:
    sink, ledger, tmp = crashed
    out = _cli("--checkpoint", str(tmp / "ck"), "--format", "twopc-file", "--option", f"path={tmp / 'out'}",
               "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "batches to finish:        [0]" in out.stdout and "orphans to roll back:     1" in out.stdout
    assert committed_ids(sink) == [] and ledger.state(0) is BatchState.DECIDED


def test_run_finishes_decided_batches_and_rolls_back_orphans(crashed) -> None:
    sink, ledger, tmp = crashed
    out = _cli("--checkpoint", str(tmp / "ck"), "--format", "twopc-file", "--option", f"path={tmp / 'out'}")
    assert out.returncode == 0, out.stderr
    assert "finished batches [0]" in out.stdout and "1 orphan(s) rolled back" in out.stdout
    assert committed_ids(sink) == [0, 1] and sink.list_prepared("job1") == []
    assert ledger.state(0) is BatchState.COMMITTED


def test_unknown_format_is_a_clear_error(crashed) -> None:
    _sink, _ledger, tmp = crashed
    out = _cli("--checkpoint", str(tmp / "ck"), "--format", "twopc-kafka")
    assert out.returncode == 2 and "unknown sink format 'twopc-kafka'" in out.stderr


def test_accept_lost_marks_a_decided_batch_done(crashed) -> None:
    _sink, ledger, tmp = crashed
    out = _cli("--checkpoint", str(tmp / "ck"), "--format", "twopc-file", "--accept-lost", "0")
    assert out.returncode == 0, out.stderr
    assert ledger.state(0) is BatchState.COMMITTED
