"""The driver's commit coordinator against a real sink (files on disk), case by case."""

from __future__ import annotations

import os

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


def test_first_commit_makes_every_row_visible_once(env) -> None:
    sink, ledger, coord = env
    handles = [run_task(sink, SINK, 0, p, p, [p * 10 + i for i in range(3)]) for p in range(2)]
    assert committed_ids(sink) == []  # prepared is invisible
    result = coord.commit_batch(0, handles)
    assert result.action == "committed" and result.committed == 2
    assert committed_ids(sink) == [0, 1, 2, 10, 11, 12]
    assert ledger.state(0) is BatchState.COMMITTED
    assert sink.list_prepared(SINK) == []


def test_replay_of_a_committed_batch_aborts_the_new_attempts(env) -> None:
    sink, _ledger, coord = env
    coord.commit_batch(0, [run_task(sink, SINK, 0, 0, 0, [1, 2])])
    replay = [run_task(sink, SINK, 0, p, 10 + p, [1, 2] if p == 0 else []) for p in range(2)]
    result = coord.commit_batch(0, replay)
    assert result.action == "replay-ignored" and result.aborted == 2
    assert committed_ids(sink) == [1, 2]
    assert sink.list_prepared(SINK) == []


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


def test_abort_with_none_slots_rolls_back_everything_of_the_batch(env) -> None:
    sink, ledger, coord = env
    ok = run_task(sink, SINK, 4, 0, 0, [1])
    lost_to_spark = run_task(sink, SINK, 4, 1, 1, [2])  # its task "failed": Spark sends None
    result = coord.abort_batch(4, [ok, None])
    assert result.aborted == 1 and list(result.swept) == [lost_to_spark.txn_id]
    assert committed_ids(sink) == [] and sink.list_prepared(SINK) == []
    assert ledger.state(4) is BatchState.UNDECIDED


def test_attempts_that_never_reached_the_driver_are_rolled_back(env) -> None:
    sink, _ledger, coord = env
    failed_attempt = run_task(sink, SINK, 2, 0, 0, [5])  # prepared, then its executor died
    speculative_loser = run_task(sink, SINK, 2, 1, 3, [6])
    winners = [run_task(sink, SINK, 2, 0, 1, [5]), run_task(sink, SINK, 2, 1, 2, [6])]
    result = coord.commit_batch(2, winners)
    assert sorted(result.swept) == sorted([failed_attempt.txn_id, speculative_loser.txn_id])
    assert committed_ids(sink) == [5, 6] and sink.list_prepared(SINK) == []


def test_other_sinks_transactions_are_not_touched(env) -> None:
    sink, _ledger, coord = env
    other = run_task(sink, "other", 0, 0, 0, [9])
    coord.commit_batch(0, [run_task(sink, SINK, 0, 0, 1, [1])])
    assert [h.txn_id for h in sink.list_prepared("other")] == [other.txn_id]


def test_a_handle_of_another_batch_is_a_protocol_error(env) -> None:
    sink, _ledger, coord = env
    with pytest.raises(ProtocolError, match="batch 1"):
        coord.commit_batch(0, [run_task(sink, SINK, 1, 0, 0, [1])])


def test_lost_transaction_is_loud_and_the_batch_stays_decided(env, tmp_path) -> None:
    sink, ledger, coord = env
    handles = [run_task(sink, SINK, 0, p, p, [p]) for p in range(2)]
    crash_commit(coord, "after_decision", 0, handles, tmp_path / "f")
    os.unlink(os.path.join(sink.path, "_twopc", "prepared", handles[1].txn_id + ".parquet"))  # an operator
    with pytest.raises(TransactionLostError, match=handles[1].txn_id):
        RecoveryCoordinator(sink, ledger, sink_id=SINK).run()
    assert ledger.state(0) is BatchState.DECIDED
    with pytest.raises(TransactionLostError):
        RecoveryCoordinator(sink, ledger, sink_id=SINK).run()


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


DRIVER_POINTS = ["before_decision", "after_decision", "between_commits", "after_commit", "after_mark"]


@pytest.mark.parametrize("point", DRIVER_POINTS)
def test_crash_at_each_driver_point_then_recovery_and_replay_is_exactly_once(env, tmp_path, point) -> None:
    sink, ledger, coord = env
    handles = [run_task(sink, SINK, 0, p, p, [p * 2, p * 2 + 1]) for p in range(3)]
    crash_commit(coord, point, 0, handles, tmp_path / "f")
    # Restart: recovery before any task, then Spark replays batch 0 (commits/0 was never written).
    fresh_ledger = CommitLedger(ledger.checkpoint_location)
    report = RecoveryCoordinator(sink, fresh_ledger, sink_id=SINK).run()
    assert sink.list_prepared(SINK) == []
    if point == "before_decision":
        assert len(report.rolled_back) == 3 and committed_ids(sink) == []
    replay = [run_task(sink, SINK, 0, 0, 20, [0, 1, 2]), run_task(sink, SINK, 0, 1, 21, [3, 4, 5])]
    CommitCoordinator(sink, fresh_ledger, SINK).commit_batch(0, replay)
    assert committed_ids(sink) == [0, 1, 2, 3, 4, 5]
    assert sink.list_prepared(SINK) == []
    assert fresh_ledger.state(0) is BatchState.COMMITTED


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
        purged: list[tuple[str, int]] = []

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
