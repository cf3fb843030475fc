"""``twopc status`` and ``twopc recover`` as an operator runs them after a real crash: a
streaming query SIGKILLed right after it recorded batch 0's decision (``after_decision``),
against real PostgreSQL, MariaDB (XA) and Redis. Status shows the batch in doubt with each
transaction's partition and age and exits 1; recover finishes it; status then shows nothing
unsettled and exits 0, and every row is in the target exactly once."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sinks import FileSink
from twopc import CommitCoordinator, CommitLedger
from twopc.testing import SinkHarness

from ._filesink_helpers import crash_commit, run_task
from ._kit_harnesses import harness_for
from ._ops_helpers import crash_query_once, twopc_cli


@pytest.fixture(params=["postgres", "mysql_xa", "redis"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SinkHarness]:
    with harness_for(request.param, request, tmp_path) as h:
        yield h


def test_status_shows_a_batch_killed_after_its_decision_until_recover_finishes_it(
        harness: SinkHarness, tmp_path: Path) -> None:
    ids = list(range(int(time.time()) % 100_000 * 100, int(time.time()) % 100_000 * 100 + 12))
    ck = crash_query_once(harness, tmp_path / "job", "after_decision@batch=0:crash", ids=ids, partitions=2)
    ledger = CommitLedger(str(ck))
    decision = ledger.decision(0)
    assert decision is not None and ledger.pending() == [decision]
    sink_id = ledger.recorded_sink_id()
    assert sink_id is not None
    where = ["--checkpoint", str(ck), "--format", harness.sink_path()]

    table = twopc_cli("status", *where, options=harness.sink_options())
    assert table.returncode == 1, table.stdout + table.stderr
    rows = [line.split() for line in table.stdout.splitlines() if line.startswith("in-doubt")]
    assert {r[-1] for r in rows} == decision.txn_ids, table.stdout
    assert "batches decided but not committed (in doubt): [0]" in table.stdout
    assert "needs an operator" in table.stdout

    report = twopc_cli("status", "--json", *where, options=harness.sink_options())
    assert report.returncode == 1, report.stderr
    status = json.loads(report.stdout)
    assert status["sink_id"] == sink_id and status["in_doubt_batches"] == [0]
    assert status["last_decided_batch"] == 0 and status["last_committed_batch"] is None
    txns = status["transactions"]
    assert {t["txn_id"] for t in txns} == decision.txn_ids and {t["state"] for t in txns} == {"in-doubt"}
    assert sorted(t["partition_id"] for t in txns) == sorted(h.partition_id for h in decision.handles)
    assert all(t["batch_id"] == 0 and t["age_seconds"] is not None and t["age_seconds"] >= 0 for t in txns), txns
    assert status["headroom"] is not None and status["headroom"]["in_use"] >= len(txns), status["headroom"]
    assert not set(harness.read_ids()) & set(ids), "rows of the in-doubt batch are visible before recover"

    done = twopc_cli("recover", *where, options=harness.sink_options())
    assert done.returncode == 0, done.stderr
    assert "finished batches [0]" in done.stdout

    after = twopc_cli("status", "--json", *where, options=harness.sink_options())
    assert after.returncode == 0, after.stdout + after.stderr
    settled = json.loads(after.stdout)
    assert settled["transactions"] == [] and settled["in_doubt_batches"] == []
    assert settled["last_committed_batch"] == 0
    assert sorted(harness.read_ids()) == sorted(ids)
    if harness.verify is not None:
        harness.verify(sink_id)


def test_status_lists_orphans_and_the_file_sinks_sizes(tmp_path: Path) -> None:
    """An orphan (prepared, named by no decision) needs an operator too; the file sink tells
    each prepared file's size and age; a checkpoint nobody wrote to is not an error."""
    sink = FileSink(str(tmp_path / "out"))
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_sink_id(None, default="job1")
    handles = [run_task(sink, "job1", 0, p, p, [p]) for p in range(2)]
    CommitCoordinator(sink, ledger, "job1").commit_batch(0, handles)
    orphan = run_task(sink, "job1", 1, 0, 9, [100])
    where = ["--checkpoint", str(tmp_path / "ck"), "--format", "twopc-file"]
    out = twopc_cli("status", "--json", *where, options={"path": str(tmp_path / "out")})
    assert out.returncode == 1, out.stderr
    (txn,) = json.loads(out.stdout)["transactions"]
    assert (txn["state"], txn["txn_id"], txn["batch_id"], txn["attempt_id"]) == ("orphan", orphan.txn_id, 1, 9)
    assert txn["size"] > 0 and txn["size_unit"] == "bytes" and txn["age_from"] == "target"
    assert twopc_cli("recover", *where, options={"path": str(tmp_path / "out")}).returncode == 0
    assert twopc_cli("status", *where, options={"path": str(tmp_path / "out")}).returncode == 0
    empty = twopc_cli("status", "--checkpoint", str(tmp_path / "none"), "--format", "twopc-file")
    assert empty.returncode == 0 and "nothing to show" in empty.stdout


def test_python_m_recovery_status_is_the_same_command(tmp_path: Path) -> None:
    import subprocess
    import sys

    sink = FileSink(str(tmp_path / "out"))
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_sink_id(None, default="job1")
    handles = [run_task(sink, "job1", 0, 0, 0, [1])]
    crash_commit(CommitCoordinator(sink, ledger, "job1"), "after_decision", 0, handles, tmp_path / "f")
    out = subprocess.run([sys.executable, "-m", "recovery", "status", "--checkpoint", str(tmp_path / "ck"),
                          "--format", "twopc-file", "--option", f"path={tmp_path / 'out'}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "in-doubt" in out.stdout, out.stdout + out.stderr
