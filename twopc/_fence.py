"""The fence between a driver's abort of a batch (:meth:`CommitCoordinator.abort_batch`) and the
batch's tasks still running (or starting after it). Three windows would leave a transaction
prepared until the next start (docs/concepts/how-it-works.md):

1. *zombie-prepare*: a task prepares after the abort's sweep listed. The driver records the abort BEFORE it sweeps; a
   task that finds a new record AFTER it prepared rolls back and raises :class:`BatchAbortedError`.
2. *late-start*: a task begins after the abort and takes its record for an earlier run's. The
   records are noted when the write is PLANNED (:meth:`CommitLedger.abort_records`); a task
   that finds one the plan did not see writes nothing.
3. *late-rollback*: the task of window 1 rolls back after the abort returned, or is killed
   first. Tasks record themselves in ``running/`` BEFORE reading the abort records; the abort
   waits (bounded, :data:`TASK_WAIT_SECONDS`) until none of the batch's live tasks is recorded.

The records live with the write's ledger. A write without a checkpoint deletes its ledger when
it ends, which a task also reads as an abort; a temporary ledger on another machine gives no
fence, but those sinks commit in one local transaction, so a zombie leaves only staged rows."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._driver_identity import DriverIdentity, process_identity, provably_dead
from ._errors import ConfigurationError, LedgerError
from ._sink import AnySink
from .ledger._ledger_records import abort_marks_in, forget_task, ledger_exists, record_task, tasks_in

if TYPE_CHECKING:
    from .ledger._ledger import CommitLedger
    from .ledger._stores import Records

__all__ = ["TASK_WAIT_SECONDS", "AbortFence", "wait_for_tasks"]

log = logging.getLogger("twopc.spark")

#: How long an abort waits for the batch's running tasks; a cancelled task ends within
#: ``spark.python.task.killTimeout`` (2 s) unless its executor is lost.
TASK_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class AbortFence:
    """What one task attempt saw of its batch's abort records when it began."""

    store: Records | None  # None: no fence (the ledger is not readable here)
    batch_id: int
    seen: frozenset[str]  # the batch's abort records of earlier runs
    ephemeral: bool  # the write deletes its ledger when it ends: a ledger gone = job ended
    record: str | None = None  # this task's running/ record
    began_aborted: bool = False  # already aborted when the task began (window 2): write nothing

    @classmethod
    def begin(cls, open_store: Callable[[], Records], where: str, batch_id: int, *, ephemeral: bool,
              baseline: frozenset[str] | None = None, partition: int = 0, attempt: int = 0,
              shared: bool = False) -> AbortFence:
        """Record the task as running, then note *batch_id*'s abort records, before the task writes.
        *baseline*: every abort record at planning (None: the batch's records now). *shared*: the store
        is the driver's own (a ledger in the target), so a missing ephemeral ledger means the write
        ended. Never raises: an unreadable ledger gives a fence that never fires (logged)."""
        none = cls(None, batch_id, frozenset(), ephemeral)
        record = None
        store = None
        try:
            store = open_store()
            if ephemeral and not ledger_exists(store):  # the write ended, or another machine's temporary ledger
                return cls(store, batch_id, frozenset(), ephemeral, began_aborted=True) if shared else none
            record = record_task(store, batch_id, partition, attempt, dict(process_identity()))
            marks = abort_marks_in(store, batch_id)
        except (LedgerError, ConfigurationError, OSError) as exc:
            if store is not None and record is not None:
                cls(store, batch_id, frozenset(), ephemeral, record).end()
            log.warning("twopc: cannot read the ledger in %s from this task (%s): if its job is aborted while it "
                        "runs, its prepared transaction is left for the next batch or start", where, exc)
            return none
        seen = marks if baseline is None else marks & baseline
        return cls(store, batch_id, seen, ephemeral, record, began_aborted=bool(marks - seen))

    def aborted(self) -> bool:
        """Whether the job was aborted (or, without a checkpoint, ended) since planning; call it after preparing.
        Raises LedgerError: the ledger cannot be read (the caller rolls back: unsure)."""
        if self.store is None:
            return False
        if self.ephemeral and not ledger_exists(self.store):
            return True
        return bool(abort_marks_in(self.store, self.batch_id) - self.seen)

    def roll_back_dead_attempts(self, sink: AnySink, sink_id: str, partition: int) -> None:
        """Before a retry writes, roll back what *partition*'s dead earlier attempts left prepared (no
        decision can name them): their row locks would stall the retry until ``lockTimeout``.
        Raises SinkError: the target failed; LedgerError: the store fails."""
        if not (dead := self.dead_attempts(partition)):
            return
        for h in sink.list_prepared(sink_id, self.batch_id):
            if h.partition_id == partition and h.attempt_id in dead.values():
                log.info("twopc: sink %s batch %s partition %s: rolling back %s, prepared by attempt %s whose "
                         "process died before it reported", sink_id, self.batch_id, partition, h.txn_id,
                         h.attempt_id)
                sink.abort(h)
        for name in dead:
            if self.store is not None:
                forget_task(self.store, name)

    def dead_attempts(self, partition: int) -> dict[str, int]:
        """``{record name: attempt id}`` of *partition*'s earlier attempts whose ``running/`` record
        remains and whose process is provably gone: they never handed a transaction to Spark, so no
        decision names it. Never raises (logged)."""
        if self.store is None:
            return {}
        try:
            records = tasks_in(self.store, self.batch_id)
        except LedgerError as exc:
            log.warning("twopc: cannot read the running tasks of batch %s (%s)", self.batch_id, exc)
            return {}
        return {name: int(rec.get("attempt", -1)) for name, rec in records.items()
                if name != self.record and rec.get("partition") == partition and provably_dead(_identity(rec))}

    def end(self) -> bool:
        """Remove the task's ``running/`` record once its transaction is prepared and checked, or rolled
        back; return whether it is gone. Never raises: a task whose record stays must not report its
        transaction (an abort waits for it, a retry rolls it back: :meth:`dead_attempts`)."""
        if self.store is None or self.record is None:
            return True
        try:
            forget_task(self.store, self.record)
        except LedgerError as exc:
            log.warning("twopc: could not remove this task's record %s from the ledger (%s): an abort of batch %s "
                        "waits for it until this worker process is gone", self.record, exc, self.batch_id)
            return False
        return True


def wait_for_tasks(ledger: CommitLedger, batch_id: int) -> dict[str, dict[str, Any]]:
    """Wait at most :data:`TASK_WAIT_SECONDS` until no task of *batch_id* is recorded running (records of
    provably dead processes are deleted); return those still running, by record name.
    Raises LedgerError: the ledger cannot be read."""
    deadline = time.monotonic() + TASK_WAIT_SECONDS
    while True:
        running = ledger.running_tasks(batch_id)
        for name, rec in list(running.items()):
            if provably_dead(_identity(rec)):
                ledger.forget_task(name)
                del running[name]
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.05)


def _identity(rec: dict[str, Any]) -> DriverIdentity:
    return DriverIdentity(host=str(rec.get("host", "")), pid=int(rec.get("pid", 0)),
                          started=int(rec.get("started", 0)))
