"""The driver-side commit coordinator: Spark's ``commit``/``abort`` of a batch become the
two-phase-commit decision. The fault points and what recovery does after a crash there:

1. ``before_decision``: only prepared transactions (including one the sink's
   :meth:`~twopc.spi.DecisionHook.before_decision` adds): rolled back, the batch replays.
2. The decision (every handle the sink names) is written to the ledger, durably.
3. ``after_decision`` / ``between_commits``: decided; recovery finishes it (``recover_and_commit``) first.
4. ``after_commit``: all committed, no mark; recovery re-commits (``ALREADY_COMMITTED``) and marks.
5. ``after_mark``: Spark has no ``commits/<batch>`` and replays the batch: its tasks write nothing
   (``twopc.spark._spark``) and the coordinator rolls back what a replay still brings."""

from __future__ import annotations

import itertools
import logging
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from twopc import faultinject

from ._errors import LedgerError, ProtocolError, SinkUnavailableError, TransactionLostError, TwoPCError
from ._handle import TransactionHandle
from ._logs import log_event
from ._retry import CommitRetry
from ._sink import (
    AnySink,
    BatchCommit,
    CommitOutcome,
    CommitShape,
    DecisionHook,
    NamedTarget,
    capability,
    commit_handles,
    purge_markers_best_effort,
)
from ._sink_id_claim import check_target, claim_writer
from .ledger._ledger import CommitLedger
from .ledger._ledger_records import BatchState, Decision

__all__ = ["BatchResult", "CommitCoordinator", "CommitMetrics"]

log = logging.getLogger("twopc.coordinator")


@dataclass
class CommitMetrics:
    """Counters in the spirit of Flink's committer metrics."""

    commits_total: int = 0
    committed: int = 0
    already_committed: int = 0
    lost: int = 0
    aborted: int = 0
    swept: int = 0
    retried: int = 0  # commit attempts repeated because the target did not answer

    def count(self, outcomes: Sequence[CommitOutcome]) -> None:
        """Add the outcomes of one batch's commits."""
        self.commits_total += len(outcomes)
        self.committed += outcomes.count(CommitOutcome.COMMITTED)
        self.already_committed += outcomes.count(CommitOutcome.ALREADY_COMMITTED)
        self.lost += outcomes.count(CommitOutcome.LOST)


@dataclass(frozen=True)
class BatchResult:
    """What the coordinator did with one batch. ``action``: ``committed``; ``finished`` (a recorded decision finished
    by a replay or an abort: ``committed`` counts this call's commits, ``already_committed`` the rest);
    ``replay-ignored`` (already committed: the replay's transactions aborted); ``aborted`` (no decision: rolled
    back); ``left-for-recovery`` (an abort could not finish a decided batch)."""

    batch_id: int
    action: str
    committed: int = 0
    already_committed: int = 0
    aborted: int = 0
    swept: tuple[str, ...] = ()
    seconds: float = 0.0


@dataclass(frozen=True)
class _Tally:
    committed: int = 0
    already: int = 0


def finish_decision(sink: AnySink, ledger: CommitLedger, decision: Decision, *, recovering: bool,
                    metrics: CommitMetrics | None = None, retry: CommitRetry | None = None,
                    format_name: str = "") -> _Tally:
    """Commit every handle of *decision* (an unanswered commit retried per *retry*), then mark the
    batch committed. *format_name* goes into the recovery command an error shows.
    Raises TransactionLostError: a handle is neither prepared nor committed; the batch stays DECIDED,
    so every retry raises again.
    Raises CommitPendingError: the target did not answer, retries included; the batch stays DECIDED."""
    m = metrics or CommitMetrics()
    def attempt(again: bool) -> list[CommitOutcome]:
        m.retried += again
        return list(_commit_outcomes(sink, decision, recovering=recovering or again))
    outcomes = (retry or CommitRetry()).run(
        attempt, what=f"the commit of batch {decision.batch_id} to {sink.describe()}",
        pending=lambda n, exc: _pending(sink, ledger, decision, n, exc, format_name))
    m.count(outcomes)
    if log.isEnabledFor(logging.DEBUG) or outcomes.count(CommitOutcome.COMMITTED) != len(outcomes):
        for handle, outcome in zip(decision.handles, outcomes, strict=True):  # the loop alone: 0.15 ms at 200
            log_event(log, logging.DEBUG if outcome is CommitOutcome.COMMITTED else logging.INFO, "commit_outcome",
                      "twopc: sink=%s batch=%s txn=%s outcome=%s", decision.sink_id, decision.batch_id,
                      handle.txn_id, outcome.value, sink_id=decision.sink_id, batch=decision.batch_id,
                      txn_id=handle.txn_id, outcome=outcome.value, recovering=recovering)
    lost = [h.txn_id for h, o in zip(decision.handles, outcomes, strict=True) if o is CommitOutcome.LOST]
    if lost:
        raise _lost(sink, ledger, decision, lost)
    faultinject.fault_point("after_commit", batch_id=decision.batch_id)
    ledger.mark_committed(decision.batch_id, summary={"transactions": len(decision.handles)})
    return _Tally(outcomes.count(CommitOutcome.COMMITTED), outcomes.count(CommitOutcome.ALREADY_COMMITTED))


def _lost(sink: AnySink, ledger: CommitLedger, decision: Decision, lost: list[str]) -> TransactionLostError:
    log_event(log, logging.ERROR, "transaction_lost", "twopc: sink=%s batch=%s lost transactions %s",
              decision.sink_id, decision.batch_id, lost, sink_id=decision.sink_id, batch=decision.batch_id,
              txn_ids=lost)
    head = (f"batch {decision.batch_id} of sink {decision.sink_id!r} was decided for commit, but "
            f"transactions {lost} are neither prepared nor committed in {sink.describe()}")
    from ._advice import recover_command  # a lost transaction's advice: a batch that commits needs none
    run = recover_command(None if ledger.in_target else ledger.checkpoint_location, "--accept-lost",
                          str(decision.batch_id), sink_id=decision.sink_id)
    accept = (f"The batch stays decided but unfinished in {ledger.location}; restore the rows, then run {run} to "
              f"mark it done")
    if _target_unknown(sink, ledger):
        return TransactionLostError(
            f"{head}. This checkpoint does not record which target the batch was prepared in (it was written by "
            f"an older twopc): if that was another server or database than this one, nothing is lost: point "
            f"the write back at it and it commits them. Only if it was this one are their rows lost (was a "
            f"prepared transaction rolled back by hand?). {accept}")
    return TransactionLostError(
        f"{head}: their rows are lost (was a prepared transaction rolled back by hand?). {accept}")


def _target_unknown(sink: AnySink, ledger: CommitLedger) -> bool:
    """Whether the checkpoint records no target though *sink* names one."""
    if ledger.in_target or capability(sink, NamedTarget).target_identity() is None:
        return False
    try:
        return ledger.recorded_target() is None
    except LedgerError:
        return True


def _pending(sink: AnySink, ledger: CommitLedger, decision: Decision, attempts: int,
             exc: SinkUnavailableError, format_name: str) -> str:
    log.error("twopc: batch %s is decided; its commit to %s got no answer in %s attempts",
              decision.batch_id, sink.describe(), attempts)
    from ._advice import recover_command  # as in _lost
    run = recover_command(None if ledger.in_target else ledger.checkpoint_location, format_name=format_name)
    return (f"batch {decision.batch_id} of sink {decision.sink_id!r} is decided, but its commit to "
            f"{sink.describe()} got no answer in {attempts} attempt(s) (last: {exc}). Nothing is lost: "
            f"the decision is recorded in {ledger.location} and the prepared transactions wait on the "
            f"server. The next start of the query finishes the batch before it writes anything, or "
            f"finish it now, once the server answers: {run}")


def _commit_outcomes(sink: AnySink, decision: Decision, *, recovering: bool) -> Iterator[CommitOutcome]:
    """Commit *decision*'s handles as the sink's :class:`CommitShape` says."""
    handles = decision.handles
    match capability(sink, BatchCommit).commit_shape(handles):
        case CommitShape.PER_HANDLE:
            yield from commit_handles(sink, handles[:1], recovering=recovering)
            if len(handles) > 1:
                faultinject.fault_point("between_commits", batch_id=decision.batch_id)
                yield from commit_handles(sink, handles[1:], recovering=recovering)
        case CommitShape.ONE_CALL | CommitShape.WHOLE_BATCH | CommitShape.LOCAL_TRANSACTION:
            yield from commit_handles(sink, handles, recovering=recovering)


def classify_prepared(ledger: CommitLedger, handles: Sequence[TransactionHandle], *,
                      up_to_batch: int | None) -> tuple[list[TransactionHandle], list[TransactionHandle]]:
    """Split handles with ``batch_id <= up_to_batch`` (all when None) into those a recorded decision
    names and orphans, in batch order. Reads the ledger only."""
    decisions: dict[int, frozenset[str]] = {}
    decided: list[TransactionHandle] = []
    orphans: list[TransactionHandle] = []
    chosen = [h for h in handles if up_to_batch is None or h.batch_id <= up_to_batch]
    for h in sorted(chosen, key=lambda h: (h.batch_id, h.txn_id)):
        if h.batch_id not in decisions:
            d = ledger.decision(h.batch_id)
            decisions[h.batch_id] = d.txn_ids if d is not None else frozenset()
        (decided if h.txn_id in decisions[h.batch_id] else orphans).append(h)
    return decided, orphans


def resolve_prepared(sink: AnySink, ledger: CommitLedger, handles: Sequence[TransactionHandle],
                     *, up_to_batch: int | None, metrics: CommitMetrics | None = None) -> list[str]:
    """Commit the prepared transactions a decision names and roll back the orphans, for batches
    ``<= up_to_batch`` (all when None); return the rolled-back ids. Safe only when no task of those
    batches can still be chosen (query start; the commit of ``up_to_batch``). *handles* must be
    listed first: the ownership check between listing and rollback keeps a displaced actor from
    rolling back what a newer owner prepared (:mod:`twopc.ledger._fencing_epochs`).
    Raises FencedError: another actor took the ledger over: nothing was rolled back."""
    m = metrics or CommitMetrics()
    decided, orphans = classify_prepared(ledger, handles, up_to_batch=up_to_batch)
    if orphans:
        ledger.check_owner()
    for _, batch in itertools.groupby(decided, key=lambda h: h.batch_id):  # decided is in batch order
        group = list(batch)
        if capability(sink, BatchCommit).commit_all(group, recovering=True) is None:
            for h in group:
                sink.recover_and_commit(h)
        m.commits_total += len(group)
    for h in orphans:
        sink.abort(h)
        m.swept += 1
        log_event(log, logging.INFO, "orphan_rolled_back", "twopc: sink=%s batch=%s rolled back orphan %s",
                  h.sink_id, h.batch_id, h.txn_id, sink_id=h.sink_id, batch=h.batch_id, txn_id=h.txn_id,
                  partition=h.partition_id, attempt=h.attempt_id)
    return [h.txn_id for h in orphans]


class CommitCoordinator(AbstractContextManager["CommitCoordinator"]):
    """Decides and commits batches for one sink id, on the driver (``with``: :meth:`close` at the end).

    Args:
        sink, ledger, sink_id: the sink, the checkpoint's ledger, the sink id it owns.
        keep_last: committed batches' records to keep (like ``minBatchesToRetain``).
        retry: how an unanswered commit is retried (``commitRetries``, ``commitRetryBackoff``).
        format_name: the Spark format named in a :class:`CommitPendingError`'s command.
        claimed: the caller already checked the target and holds the sink id's claim (the Spark
            runtime does at plan time). Otherwise both happen here
            (:func:`~twopc._sink_id_claim.check_target`, :func:`~twopc._sink_id_claim.claim_writer`),
            the target is recorded with the first decision, a SQL lease is held until
            :meth:`close` (or garbage collection), and the ledger is claimed unless it has an epoch.

    Raises:
        TargetMismatchError: the checkpoint belongs to another target.
        ConcurrentWriterError: another writer has the sink id."""

    def __init__(self, sink: AnySink, ledger: CommitLedger, sink_id: str, *, keep_last: int = 100,
                 retry: CommitRetry | None = None, format_name: str = "", claimed: bool = False) -> None:
        self.sink = sink
        self.format_name = format_name
        self.ledger = ledger
        self.sink_id = sink_id
        self.keep_last = keep_last
        self.retry = retry or CommitRetry()
        self.metrics = CommitMetrics()
        self._target_recorded = claimed
        self._release: Callable[[], None] = lambda: None
        if not claimed:
            check_target(sink, ledger, sink_id, record=False)
            if (claim := claim_writer(sink, ledger, sink_id)) is not None:
                finalizer = weakref.finalize(self, claim.release_collected)
                def release() -> None:  # close(): now, on this thread; a collection: release_collected
                    if finalizer.detach() is not None:
                        claim.release()
                self._release = release
            if ledger.epoch is None:  # owner of the checkpoint: a recover (or another driver) fences it
                ledger.claim()

    def close(self) -> None:
        """Give up the sink id's claim (a SQL lease), if this coordinator took one."""
        self._release()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def commit_batch(self, batch_id: int, handles: Sequence[TransactionHandle | None]) -> BatchResult:
        """Commit the batch of *handles* (``None`` for partitions that wrote nothing) exactly once. On
        return every effect is committed once and no transaction ``<= batch_id`` stays prepared.
        Raises FencedError: another driver took the ledger over; nothing was committed.
        Raises TargetMismatchError: the checkpoint belongs to another target; nothing was done.
        Raises TransactionLostError: a decided transaction is gone.
        Raises ProtocolError: a handle belongs to another sink or batch.
        Raises CommitPendingError: the target did not answer (the batch stays decided).
        Raises SinkError: the target failed; rerunning (or recovery) finishes the batch."""
        started = time.monotonic()
        fresh = self._check(batch_id, handles)
        if not self._target_recorded:  # a coordinator built by hand: the target is recorded before a decision
            check_target(self.sink, self.ledger, self.sink_id, record=True)
            self._target_recorded = True
        self.ledger.check_owner()
        state = self.ledger.state(batch_id)
        if state is BatchState.COMMITTED:
            for h in fresh:
                self.sink.abort(h)
            swept = self._sweep(batch_id)
            return self._done(batch_id, "replay-ignored", started, aborted=len(fresh), swept=swept)
        replaced: set[str] = set()  # attempts the sink's before_decision took over (not rolled back: moved)
        if state is BatchState.DECIDED:
            decision = self.ledger.decision(batch_id)
            assert decision is not None
            action, recovering = "finished", True
        elif fresh and capability(self.sink, BatchCommit).commit_shape(fresh) is CommitShape.LOCAL_TRANSACTION:
            return self._commit_atomically(batch_id, fresh, started)
        else:
            faultinject.fault_point("before_decision", batch_id=batch_id)
            named = tuple(capability(self.sink, DecisionHook).before_decision(batch_id, fresh))
            replaced = {h.txn_id for h in fresh} - {h.txn_id for h in named}
            decision = self.ledger.record_decision(Decision(self.sink_id, batch_id, named))
            _decided(decision)
            faultinject.fault_point("after_decision", batch_id=batch_id)
            action, recovering = "committed", False
        tally = finish_decision(self.sink, self.ledger, decision, recovering=recovering, metrics=self.metrics,
                                retry=self.retry, format_name=self.format_name)
        faultinject.fault_point("after_mark", batch_id=batch_id)
        extra = [h for h in fresh if h.txn_id not in decision.txn_ids]
        for h in extra:  # the replaced ones too: what is left of them goes
            self.sink.abort(h)
        swept = self._sweep(batch_id)
        self._purge()
        return self._done(batch_id, action, started, committed=tally.committed, already=tally.already,
                          aborted=sum(h.txn_id not in replaced for h in extra), swept=swept,
                          txn_ids=decision.txn_ids)

    def _commit_atomically(self, batch_id: int, fresh: list[TransactionHandle], started: float) -> BatchResult:
        """A local commit transaction is its own decision: commit, then record it. A failed commit leaves
        no decision (Spark's abort rolls back); after a crash the target's marker answers the replay."""
        faultinject.fault_point("before_decision", batch_id=batch_id)
        def attempt(again: bool) -> list[CommitOutcome] | None:
            self.metrics.retried += again
            return capability(self.sink, BatchCommit).commit_all(fresh, recovering=again)
        outcomes = self.retry.run(
            attempt, what=f"the commit of batch {batch_id} to {self.sink.describe()}",
            pending=lambda n, exc: (
                f"batch {batch_id} of sink {self.sink_id!r}: its one commit transaction on {self.sink.describe()} "
                f"got no answer in {n} attempt(s) (last: {exc}); no decision is recorded. Whether it committed, "
                f"the target's batch marker tells: rerun the write (or restart the query) once the server "
                f"answers, and a committed batch is not written twice"))
        if outcomes is None or len(outcomes) != len(fresh):
            raise ProtocolError(f"{self.sink.describe()} claims atomic commits but commit_all returned {outcomes!r}")
        faultinject.fault_point("after_decision", batch_id=batch_id)
        decision = self.ledger.record_decision(Decision(self.sink_id, batch_id, tuple(fresh)))
        _decided(decision)
        lost = [h.txn_id for h, o in zip(fresh, outcomes, strict=True) if o is CommitOutcome.LOST]
        if lost:  # decided and unfinished, like a lost transaction of a per-handle commit: loud every retry
            self.metrics.lost += len(lost)
            raise _lost(self.sink, self.ledger, decision, lost)
        self.ledger.mark_committed(batch_id, summary={"transactions": len(fresh), "atomic": True})
        committed = outcomes.count(CommitOutcome.COMMITTED)
        self.metrics.count(outcomes)
        faultinject.fault_point("after_mark", batch_id=batch_id)
        swept = self._sweep(batch_id)
        self._purge()
        return self._done(batch_id, "committed", started, committed=committed, already=len(fresh) - committed,
                          swept=swept, txn_ids=decision.txn_ids)

    def _purge(self) -> None:
        """Forget committed records but the :attr:`keep_last` newest, and the sink's markers below the
        oldest batch recovery may still ask about (the oldest kept, or an older unfinished decision)."""
        if not self.ledger.purge(keep_last=self.keep_last):
            return
        if retained := self.ledger.committed_batches():
            below = min([retained[0], *(d.batch_id for d in self.ledger.pending())])
            purge_markers_best_effort(self.sink, self.sink_id, below)

    def abort_batch(self, batch_id: int, handles: Sequence[TransactionHandle | None]) -> BatchResult:
        """Roll back the failed write of *batch_id* (``None`` slots' transactions are found by listing).
        A decided batch is finished instead, or left for recovery with a warning (the error that made
        Spark abort is the one to see). A fenced driver touches nothing. The abort is recorded and the
        batch's running tasks awaited (:mod:`twopc._fence`) before anything is rolled back."""
        started = time.monotonic()
        fresh = self._check(batch_id, handles)
        if self.ledger.fenced():  # a zombie: the new owner finishes or rolls back what it left
            log.warning("twopc: sink=%s batch=%s: another driver owns %s; this driver leaves the batch to it",
                        self.sink_id, batch_id, self.ledger.location)
            return self._done(batch_id, "fenced", started)
        self._fence_zombie_prepares(batch_id)
        self._wait_for_tasks(batch_id)
        decision = self.ledger.decision(batch_id)
        state = self.ledger.state(batch_id)
        tally: _Tally | None = None
        if decision is not None and state is BatchState.DECIDED:
            try:
                tally = finish_decision(self.sink, self.ledger, decision, recovering=True, metrics=self.metrics,
                                        retry=CommitRetry(0))
            except TwoPCError as exc:
                log.warning("twopc: batch %s of sink %s is decided but could not be finished while aborting "
                            "(%s): left for recovery (the next start of the query, or twopc recover)",
                            batch_id, self.sink_id, exc)
                return self._done(batch_id, "left-for-recovery", started)
        elif decision is not None and state is BatchState.COMMITTED:  # finished before: all of it was committed
            tally = _Tally(already=len(decision.txn_ids))
        keep = decision.txn_ids if decision is not None else frozenset()
        extra = [h for h in fresh if h.txn_id not in keep]
        for h in extra:
            self.sink.abort(h)
        swept = self._sweep(batch_id)
        if decision is not None and tally is not None:  # a decision is final: the batch ended committed
            return self._done(batch_id, "finished", started, committed=tally.committed, already=tally.already,
                              aborted=len(extra), swept=swept, txn_ids=decision.txn_ids)
        return self._done(batch_id, "aborted", started, aborted=len(extra), swept=swept)

    def _fence_zombie_prepares(self, batch_id: int) -> None:
        """Record the abort before the sweep (*zombie-prepare window*); a store failure only loses the fence."""
        try:
            self.ledger.record_abort(batch_id)
        except LedgerError as exc:
            log.warning("twopc: sink=%s batch=%s: could not record the abort in %s (%s): a task of the failed "
                        "job that prepares after this abort stays prepared until the next batch or start",
                        self.sink_id, batch_id, self.ledger.location, exc)

    def _wait_for_tasks(self, batch_id: int) -> None:
        """Wait, bounded, for the batch's running tasks (*late-rollback window*); name those left."""
        from ._fence import TASK_WAIT_SECONDS, wait_for_tasks  # an abort's: a commit waits for no task
        try:
            left = wait_for_tasks(self.ledger, batch_id)
        except LedgerError as exc:
            log.warning("twopc: sink=%s batch=%s: could not read the batch's running tasks in %s (%s): the abort "
                        "sweeps without waiting for them", self.sink_id, batch_id, self.ledger.location, exc)
            return
        if left:
            tasks = ", ".join(f"partition {r.get('partition')} attempt {r.get('attempt')} (pid {r.get('pid')} on "
                              f"{r.get('host')})" for r in left.values())
            log.warning("twopc: sink=%s batch=%s: %s task(s) of the aborted batch still ran after %.0f s: %s. A "
                        "transaction one of them prepares is rolled back by that task when it sees the abort; if it "
                        "is killed first, the next start of the query (or twopc recover) rolls it back",
                        self.sink_id, batch_id, len(left), TASK_WAIT_SECONDS, tasks)

    # ------------------------------------------------------------------------------
    def _check(self, batch_id: int, handles: Sequence[TransactionHandle | None]) -> list[TransactionHandle]:
        fresh = [h for h in handles if h is not None]
        for h in fresh:
            if h.sink_id != self.sink_id or h.batch_id != batch_id:
                raise ProtocolError(f"handle {h.txn_id} belongs to sink {h.sink_id!r} batch {h.batch_id}, "
                                    f"not to sink {self.sink_id!r} batch {batch_id}")
        return fresh

    def _sweep(self, batch_id: int) -> list[str]:
        prepared = self.sink.list_prepared(self.sink_id)
        return resolve_prepared(self.sink, self.ledger, prepared, up_to_batch=batch_id, metrics=self.metrics)

    def _done(self, batch_id: int, action: str, started: float, *, committed: int = 0, already: int = 0,
              aborted: int = 0, swept: Sequence[str] = (), txn_ids: frozenset[str] = frozenset()) -> BatchResult:
        self.metrics.aborted += aborted
        result = BatchResult(batch_id, action, committed, already, aborted, tuple(swept), time.monotonic() - started)
        log_event(log, logging.INFO, "batch_done",
                  "twopc: sink=%s batch=%s action=%s committed=%s already_committed=%s aborted=%s swept=%s %.1fms",
                  self.sink_id, batch_id, action, committed, already, aborted, len(swept), result.seconds * 1000,
                  sink_id=self.sink_id, batch=batch_id, action=action, committed=committed,
                  already_committed=already, aborted=aborted, swept=list(swept), txn_ids=sorted(txn_ids),
                  seconds=round(result.seconds, 6))
        return result


def _decided(decision: Decision) -> None:
    if log.isEnabledFor(logging.DEBUG):  # its fields sort every id of the batch
        log_event(log, logging.DEBUG, "decision_recorded", "twopc: sink=%s batch=%s decided %s transaction(s)",
                  decision.sink_id, decision.batch_id, len(decision.handles), sink_id=decision.sink_id,
                  batch=decision.batch_id, txn_ids=sorted(decision.txn_ids))
