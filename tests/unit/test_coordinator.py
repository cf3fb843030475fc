"""The driver's commit coordinator against a real sink (files on disk): the cases that are
the coordinator's own (finishing a decided batch from a replay without recovery, foreign
handles, recovery plans, retention, atomic commits answering LOST). What every sink must
survive under the coordinator (first commit, orphan sweep, replays, aborts with None
slots, other sinks untouched, a crash at each driver point, lost transactions) is the
conformance kit's, run on FileSink and the other sinks in test_kit_sinks.py."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from twopc import CommitCoordinator, CommitLedger, RecoveryCoordinator, TransactionLostError
from twopc.sinks import FileSink
from twopc.spi import CommitPendingError, ProtocolError, SinkUnavailableError
from twopc.spi.operations import BatchState
from twopc.spi.runtime import CommitRetry

from tests._broken_sinks import ClaimsAtomicCommit
from tests._filesink_helpers import committed_ids, crash_commit, run_task

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

        def purge_markers(self, sink_id: str, below_batch: int) -> int:
            self.purged.append((sink_id, below_batch))
            return 0

    sink = Recording(str(tmp_path / "out"))
    ledger = CommitLedger(str(tmp_path / "ck"))
    coord = CommitCoordinator(sink, ledger, SINK, keep_last=2)
    for b in range(4):
        coord.commit_batch(b, [run_task(sink, SINK, b, 0, b, [b])])
    assert ledger.committed_batches() == [2, 3]
    assert sink.purged == [(SINK, 1), (SINK, 2)]
    assert committed_ids(sink) == [0, 1, 2, 3]


class _Unanswered(FileSink):
    """A file sink whose target does not answer the next *silent* commits (the commit may
    or may not have happened: here it has, as when a reply is lost on the way back)."""

    silent: ClassVar[int] = 0

    def commit(self, handle):
        outcome = super().commit(handle)
        if _Unanswered.silent > 0:
            _Unanswered.silent -= 1
            raise SinkUnavailableError(f"no reply from {self.describe()} (test)")
        return outcome

    def recover_and_commit(self, handle):
        return self.commit(handle)


def test_an_unanswered_commit_is_retried_then_left_decided_for_the_next_start(tmp_path, caplog) -> None:
    sink = _Unanswered(str(tmp_path / "out"))
    ledger = CommitLedger(str(tmp_path / "ck"))
    coord = CommitCoordinator(sink, ledger, SINK, retry=CommitRetry(retries=2, backoff=0))
    _Unanswered.silent = 2  # two lost replies: the third attempt answers ALREADY_COMMITTED
    result = coord.commit_batch(0, [run_task(sink, SINK, 0, p, p, [p]) for p in range(2)])
    assert result.action == "committed" and committed_ids(sink) == [0, 1]

    _Unanswered.silent = 10**6  # the target stays silent
    handles = [run_task(sink, SINK, 1, p, p, [10 + p]) for p in range(2)]
    with pytest.raises(CommitPendingError) as err:
        coord.commit_batch(1, handles)
    assert "batch 1 of sink 'q1' is decided" in str(err.value) and "3 attempt(s)" in str(err.value)
    assert "twopc recover" in str(err.value) and "next start of the query" in str(err.value)
    assert ledger.state(1) is BatchState.DECIDED

    # Spark's abort after the failed commit: cannot finish the batch either; warns, leaves it, never raises
    assert coord.abort_batch(1, handles).action == "left-for-recovery"
    assert "left for recovery" in caplog.text
    assert ledger.state(1) is BatchState.DECIDED

    _Unanswered.silent = 0  # healed: the next start finishes the decided batch
    RecoveryCoordinator(sink, ledger, sink_id=SINK).run()
    assert ledger.state(1) is BatchState.COMMITTED
    assert committed_ids(sink) == [0, 1, 10, 11]
    assert sink.list_prepared(SINK) == []


def _batch_done(caplog: pytest.LogCaptureFixture, batch: int) -> dict[str, Any]:
    [record] = [r for r in caplog.records if getattr(r, "twopc_event", None) == "batch_done"
                and r.twopc["batch"] == batch]  # type: ignore[attr-defined]  # set by log_event
    return {"message": record.getMessage(), **record.twopc}  # type: ignore[attr-defined]  # set by log_event


def test_an_abort_that_finishes_a_decided_batch_logs_it_as_finished_with_its_commits(env, tmp_path, caplog) -> None:
    sink, ledger, coord = env
    caplog.set_level("INFO", logger="twopc.coordinator")
    handles = [run_task(sink, SINK, 0, p, p, [p]) for p in range(3)]
    crash_commit(coord, "between_commits", 0, handles, tmp_path / "f")  # decided, one of three committed
    assert ledger.state(0) is BatchState.DECIDED and committed_ids(sink) == [0]
    caplog.clear()

    result = CommitCoordinator(sink, CommitLedger(ledger.checkpoint_location), SINK).abort_batch(0, handles)
    assert ledger.state(0) is BatchState.COMMITTED and committed_ids(sink) == [0, 1, 2]
    done = _batch_done(caplog, 0)
    assert (done["action"], done["committed"], done["already_committed"], done["aborted"]) == ("finished", 2, 1, 0)
    assert "action=finished committed=2 already_committed=1 aborted=0" in str(done["message"])
    assert sorted(done["txn_ids"]) == sorted(h.txn_id for h in handles)
    assert (result.action, result.committed, result.already_committed) == ("finished", 2, 1)

    caplog.clear()  # Spark aborts it again (a retried abort): the batch stays committed, nothing more to do
    again = CommitCoordinator(sink, CommitLedger(ledger.checkpoint_location), SINK).abort_batch(0, handles)
    done = _batch_done(caplog, 0)
    assert (done["action"], done["committed"], done["already_committed"]) == ("finished", 0, 3)
    assert (again.action, again.committed, again.already_committed) == ("finished", 0, 3)
    assert committed_ids(sink) == [0, 1, 2]
