"""Recovery: bring a sink's target to the state its ledger decided, on the driver before any task of a planned write
runs (a prepared transaction's row locks would stall a replay), and by ``twopc recover``."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from twopc import faultinject

from .._coordinator import CommitMetrics, classify_prepared, finish_decision, resolve_prepared
from .._logs import log_event
from .._sink import AnySink
from .._sink_id_claim import check_target, claim_writer
from ..ledger._ledger import CommitLedger
from . import _metrics

__all__ = ["RecoveryCoordinator", "RecoveryPlan", "RecoveryReport"]

log = logging.getLogger("twopc.recovery")


@dataclass(frozen=True)
class RecoveryPlan:
    """What :meth:`RecoveryCoordinator.run` would do, read without changing anything."""

    sink_id: str
    batches_to_finish: tuple[int, ...]
    transactions_to_commit: tuple[str, ...]
    orphans_to_roll_back: tuple[str, ...]

    @property
    def is_clean(self) -> bool:
        return not (self.batches_to_finish or self.transactions_to_commit or self.orphans_to_roll_back)


@dataclass
class RecoveryReport:
    """What :meth:`RecoveryCoordinator.run` did."""

    sink_id: str
    finished_batches: list[int] = field(default_factory=list)
    committed: int = 0
    already_committed: int = 0
    rolled_back: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def changed_anything(self) -> bool:
        return bool(self.finished_batches or self.committed or self.rolled_back)

    def summary(self) -> str:
        return (f"sink {self.sink_id}: finished batches {self.finished_batches or 'none'}, {self.committed} committed "
                f"now, {self.already_committed} already committed, {len(self.rolled_back)} orphan(s) rolled back, "
                f"{self.seconds * 1000:.1f} ms")


class RecoveryCoordinator:
    """Finishes decided batches and rolls back orphans of one sink id.

    Args:
        sink: the sink whose target is recovered (from its own options: handles hold no credentials).
        ledger: the checkpoint's ledger (or pass ``checkpoint_location``).
        sink_id: default: the one recorded in the ledger.
        claimed: the caller already checked the target and holds the sink id's claim (the Spark
            runtime); otherwise :meth:`plan` and :meth:`run` check it and :meth:`run` claims it.

    When :meth:`run` returns, every decided batch is committed and marked and nothing of the sink id
    is prepared. Safe to repeat, and beside a running query (which it fences) or a second driver
    (whose takeover fences it): no transaction a standing decision names is rolled back."""

    def __init__(self, sink: AnySink, ledger: CommitLedger | None = None, *,
                 checkpoint_location: str | None = None, sink_id: str | None = None, claimed: bool = False) -> None:
        if ledger is None:
            if checkpoint_location is None:
                raise ValueError("pass a ledger or a checkpoint_location")
            ledger = CommitLedger(checkpoint_location)
        self.sink = sink
        self.ledger = ledger
        self.sink_id = sink_id or ledger.bind_sink_id(None, default="")
        if not self.sink_id:
            raise ValueError(f"no sink id recorded in {ledger.location}; pass sink_id")
        self.metrics = CommitMetrics()
        self.claimed = claimed

    def plan(self) -> RecoveryPlan:
        """What :meth:`run` would do, changing nothing.
        Raises TargetMismatchError: the checkpoint belongs to another target."""
        if not self.claimed:
            check_target(self.sink, self.ledger, self.sink_id, record=False)
        pending = self.ledger.pending()
        to_commit, orphans = classify_prepared(self.ledger, self.sink.list_prepared(self.sink_id), up_to_batch=None)
        return RecoveryPlan(self.sink_id, tuple(d.batch_id for d in pending),
                            tuple(h.txn_id for h in to_commit), tuple(h.txn_id for h in orphans))

    def run(self) -> RecoveryReport:
        """Finish every decided batch, then roll back every orphan. Once the target answers, takes the
        ledger over (unless claimed): a running query's driver is fenced (:class:`~twopc.FencedError`)
        and its undecided batch rolled back here.
        Raises FencedError: another actor took the ledger over meanwhile; what was done stays done.
        Raises TargetMismatchError: the checkpoint belongs to another target; nothing was done.
        Raises ConcurrentWriterError: another writer has the sink id; nothing was done.
        Raises TransactionLostError: a decided transaction is gone (the batch stays decided).
        Raises SinkError: the target failed; run again."""
        if self.claimed:
            return self._run()
        # reach the target first: a recover that cannot changes nothing and fences no query
        self.sink.list_prepared(self.sink_id)
        check_target(self.sink, self.ledger, self.sink_id, record=False)
        claim = claim_writer(self.sink, self.ledger, self.sink_id)
        try:
            return self._run()
        finally:
            if claim is not None:
                claim.release()

    def _run(self) -> RecoveryReport:
        started = time.monotonic()
        report = RecoveryReport(self.sink_id)
        if self.ledger.epoch is None:  # fence any driver still running before rolling anything back
            self.ledger.claim(actor="recover")
        for decision in self.ledger.pending():
            tally = finish_decision(self.sink, self.ledger, decision, recovering=True, metrics=self.metrics)
            report.finished_batches.append(decision.batch_id)
            report.committed += tally.committed
            report.already_committed += tally.already
            log_event(log, logging.WARNING, "recovery_finished_batch",
                      "twopc recovery: sink=%s batch=%s finished a decided batch: %s committed now, %s already",
                      self.sink_id, decision.batch_id, tally.committed, tally.already, sink_id=self.sink_id,
                      batch=decision.batch_id, txn_ids=sorted(decision.txn_ids), committed=tally.committed,
                      already_committed=tally.already)
            faultinject.fault_point("during_recovery", batch_id=decision.batch_id)
        prepared = self.sink.list_prepared(self.sink_id)
        before = self.metrics.commits_total
        report.rolled_back = resolve_prepared(self.sink, self.ledger, prepared, up_to_batch=None,
                                              metrics=self.metrics)
        report.committed += self.metrics.commits_total - before
        if report.rolled_back:
            faultinject.fault_point("during_recovery", batch_id=None)
        report.seconds = time.monotonic() - started
        if report.changed_anything:
            _metrics.record_recovery(self.ledger, committed=report.committed, rolled_back=len(report.rolled_back),
                                     finished_batches=len(report.finished_batches))
        log_event(log, logging.WARNING if report.changed_anything else logging.DEBUG, "recovery_run",
                  "twopc recovery: %s", report.summary(), sink_id=self.sink_id,
                  finished_batches=report.finished_batches,
                  committed=report.committed, already_committed=report.already_committed,
                  rolled_back=report.rolled_back, seconds=round(report.seconds, 6))
        return report
