"""The driver's commit coordinator against a real sink (files on disk): the cases that are
the coordinator's own (finishing a decided batch from a replay without recovery, foreign
handles, recovery plans, retention, atomic commits answering LOST). What every sink must
survive under the coordinator (first commit, orphan sweep, replays, aborts with None
slots, other sinks untouched, a crash at each driver point, lost transactions) is the
conformance kit's, run on FileSink and the other sinks in test_kit_sinks.py."""

from __future__ import annotations

from typing import ClassVar

import pytest

from sinks import FileSink
from twopc import (
    BatchState,
    CommitCoordinator,
    CommitLedger,
    ProtocolError,
    RecoveryCoordinator,
    TransactionLostError,
)

from ._broken_sinks import ClaimsAtomicCommit
from ._filesink_helpers import committed_ids, crash_commit, run_task

SINK = "q1"


@pytest.fixture
def env(tmp_path):
    sink = FileSink(str(tmp_path / "out"))
    ledger = CommitLedger(str(tmp_path / "ck"))
    return sink, ledger, CommitCoordinator(sink, ledger, SINK)


def test_decided_but_unfinished_batch_is_finished_by_the_replay(env, tmp_path) -> None:
    sink, ledger, coord = env
    first = [run_task(sink, SINK, 0, p, p, [p]) for p in range(3)]
    crash_commit(coord, "between_commits", 0, first, tmp_path / "f")
    assert ledger.state(0) is BatchState.DECIDED and committed_ids(sink) == [0]
    # Spark replays the batch with new attempts, repartitioned into two tasks.
    replay = [run_task(sink, SINK, 0, 0, 7, [0, 1]), run_task(sink, SINK, 0, 1, 8, [2])]
    result = CommitCoordinator(sink, CommitLedger(ledger.checkpoint_location), SINK).commit_batch(0, replay)
    assert result.action == "finished" and result.committed == 2 and result.already_committed == 1
    assert result.aborted == 2
    assert committed_ids(sink) == [0, 1, 2]
    assert sink.list_prepared(SINK) == []


def test_a_handle_of_another_batch_is_a_protocol_error(env) -> None:
    sink, _ledger, coord = env
    with pytest.raises(ProtocolError, match="batch 1"):
        coord.commit_batch(0, [run_task(sink, SINK, 1, 0, 0, [1])])


def test_an_atomic_commit_that_answers_lost_is_loud_and_the_batch_stays_decided(tmp_path) -> None:
    """A sink that commits batches through commit_all and answers LOST for a transaction
    that is gone: the batch must not be marked committed (it was, silently, before the
    conformance kit's lost-transaction check found it)."""
    sink = ClaimsAtomicCommit(str(tmp_path / "out"))
    ledger = CommitLedger(str(tmp_path / "ck"))
    h = run_task(sink, SINK, 0, 0, 0, [1])
    sink.abort(h)  # rolled back behind the coordinator's back
    with pytest.raises(TransactionLostError, match=h.txn_id):
        CommitCoordinator(sink, ledger, SINK).commit_batch(0, [h])
    assert ledger.state(0) is BatchState.DECIDED
    with pytest.raises(TransactionLostError):
        RecoveryCoordinator(sink, ledger, sink_id=SINK).run()
    assert ledger.state(0) is BatchState.DECIDED and committed_ids(sink) == []


def test_recovery_plan_changes_nothing_and_run_does_what_it_said(env, tmp_path) -> None:
    sink, ledger, coord = env
    decided = [run_task(sink, SINK, 0, p, p, [p]) for p in range(2)]
    crash_commit(coord, "after_decision", 0, decided, tmp_path / "f")
    orphan = run_task(sink, SINK, 1, 0, 5, [42])
    rc = RecoveryCoordinator(sink, ledger, sink_id=SINK)
    plan = rc.plan()
    assert plan.batches_to_finish == (0,) and plan.orphans_to_roll_back == (orphan.txn_id,)
    assert committed_ids(sink) == [] and len(sink.list_prepared(SINK)) == 3
    report = rc.run()
    assert report.finished_batches == [0] and report.rolled_back == [orphan.txn_id]
    assert committed_ids(sink) == [0, 1]
    assert rc.plan().is_clean
    assert not RecoveryCoordinator(sink, ledger, sink_id=SINK).run().changed_anything


def test_retention_purges_old_ledger_records_and_the_sinks_bookkeeping(tmp_path) -> None:
    class Recording(FileSink):
        purged: ClassVar[list[tuple[str, int]]] = []

        def purge_committed(self, sink_id: str, below_batch: int) -> None:
            self.purged.append((sink_id, below_batch))

    sink = Recording(str(tmp_path / "out"))
    ledger = CommitLedger(str(tmp_path / "ck"))
    coord = CommitCoordinator(sink, ledger, SINK, keep_last=2)
    for b in range(4):
        coord.commit_batch(b, [run_task(sink, SINK, b, 0, b, [b])])
    assert ledger.committed_batches() == [2, 3]
    assert sink.purged == [(SINK, 1), (SINK, 2)]
    assert committed_ids(sink) == [0, 1, 2, 3]
