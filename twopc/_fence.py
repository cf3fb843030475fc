"""The fence between a driver's abort of a batch (:meth:`CommitCoordinator.abort_batch`) and the
batch's tasks still running, which Spark only asks to stop (or even starts after the abort).
Three windows would leave a transaction prepared until the next start of the write (the
table of docs/concepts/how-it-works.md):

1. *zombie-prepare*: a task prepares after the abort listed the batch's transactions. The
   driver records the abort BEFORE it sweeps; a task looks for a new record AFTER it
   prepared, and one that finds it rolls back and raises :class:`BatchAbortedError`.
2. *late-start*: a task that begins after the abort takes the abort's record for an earlier
   run's (a rerun with the same ``txnVersion``, a replayed micro-batch). The records are
   noted when the write is PLANNED (:meth:`CommitLedger.abort_records`): a record the plan
   did not see is this run's abort, and a task that finds one before it writes writes nothing.
3. *late-rollback*: the task of window 1 rolls back only after the abort returned, or is
   killed between its PREPARE and its check. A task records itself in ``running/`` BEFORE it
   reads the abort records and removes the record when it ends; the abort waits (bounded,
   :data:`TASK_WAIT_SECONDS`) until no live task of the batch is recorded, then sweeps.

The records live wherever the write's ledger does (the checkpoint's ``twopc/``, or the
target's ledger table: :mod:`twopc._target`). A write without a checkpoint deletes its ledger
when it ends: a task that finds it gone after preparing rolls back too. A temporary ledger on
another machine cannot be read: such writes have no fence, but their sinks commit a batch in
one local transaction, so a zombie leaves only staged rows that later writes delete.
"""

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

__all__ = ["TASK_WAIT_SECONDS", "AbortFence", "TaskWait", "wait_for_tasks"]

log = logging.getLogger("twopc.spark")

#: How long a driver's abort waits for the batch's tasks still running before it sweeps.
#: A task of an aborted job ends within ``spark.python.task.killTimeout`` (2 s) of Spark's
#: cancel; one that runs on longer is on an executor the driver lost.
TASK_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class AbortFence:
    """What one task attempt saw of its batch's abort records when it began."""

    store: Records | None
    """The ledger's store (:func:`twopc.ledger._ledger_records.ledger_store`, or a target ledger's), ``None``:
    no fence (the ledger is not readable here)."""
    batch_id: int
    seen: frozenset[str]
    """The batch's abort records of earlier runs."""
    ephemeral: bool
    """The write deletes its ledger when it ends (no checkpoint): a ledger gone = job ended."""
    record: str | None = None
    """This task's ``running/`` record (None: none was written)."""
    began_aborted: bool = False
    """The batch was already aborted when the task began (window 2): it must write nothing."""

    @classmethod
    def begin(cls, open_store: Callable[[], Records], where: str, batch_id: int, *, ephemeral: bool,
              baseline: frozenset[str] | None = None, partition: int = 0, attempt: int = 0,
              shared: bool = False) -> AbortFence:
        """Record the task as running, then note the abort records of *batch_id* in the
        ledger's store (*open_store*'s; *where* names it), before the task writes.
        *baseline*: every abort record when the write was planned (None: take the batch's
        records now as the earlier runs' ones). *shared*: the store is the driver's own
        wherever the task runs (a ledger in the target), so an ephemeral ledger missing there
        means the write ended. Never raises: a ledger this process cannot read gives a fence
        that never fires (logged)."""
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
        """Whether the task's job was aborted (or, without a checkpoint, ended) since it was
        planned. Call it after the transaction is prepared.

        Raises:
            LedgerError: the ledger cannot be read now (the caller rolls back: unsure).
        """
        if self.store is None:
            return False
        if self.ephemeral and not ledger_exists(self.store):
            return True
        return bool(abort_marks_in(self.store, self.batch_id) - self.seen)

    def roll_back_dead_attempts(self, sink: AnySink, sink_id: str, partition: int) -> None:
        """Roll back what the earlier attempts of *partition* that died after preparing left
        prepared (:meth:`dead_attempts`: no decision can name them), before a retry writes:
        their row locks would make it wait on every key it shares with them, on a table with a
        unique key, until ``lockTimeout`` failed the write.

        Raises:
            SinkError: the target failed; LedgerError: the store fails.
        """
        dead = self.dead_attempts(partition)
        if not dead:
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
        """The earlier attempts of *partition* in this batch that died while writing: their
        ``running/`` record is still there and their process is provably gone (on this host),
        as ``{record name: attempt id}``. Such an attempt never handed its transaction to Spark
        (a task removes its record before it returns; one that could not rolls its transaction back
        and fails instead of returning it),
        so no decision can name it. Never raises: a ledger that cannot be read gives none
        (logged)."""
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
        """Remove the task's ``running/`` record: call it once the task's transaction is
        prepared and checked, or rolled back. Returns whether the record is gone (or there was
        none). Never raises: a record left behind is waited for by an abort until its process
        is gone, or for :data:`TASK_WAIT_SECONDS`, and makes a retry of the partition roll back
        this attempt's transaction once its process is gone (:meth:`dead_attempts`), so a task
        whose record stays must not report its transaction (:mod:`twopc.spark._spark` rolls it back)."""
        if self.store is None or self.record is None:
            return True
        try:
            forget_task(self.store, self.record)
        except LedgerError as exc:
            log.warning("twopc: could not remove this task's record %s from the ledger (%s): an abort of batch %s "
                        "waits for it until this worker process is gone", self.record, exc, self.batch_id)
            return False
        return True


@dataclass(frozen=True)
class TaskWait:
    """What :func:`wait_for_tasks` found."""

    waited: bool
    """Some task of the batch was still running when the wait began."""
    left: dict[str, dict[str, Any]]
    """The tasks still recorded as running when the wait gave up (by record name)."""


def wait_for_tasks(ledger: CommitLedger, batch_id: int, *, timeout: float = TASK_WAIT_SECONDS) -> TaskWait:
    """Wait until no task attempt of *batch_id* is recorded as running, for at most *timeout*
    seconds. A record whose process is provably gone (on this host) is deleted, not waited for.

    Raises:
        LedgerError: the ledger cannot be read.
    """
    deadline = time.monotonic() + timeout
    waited = False
    while True:
        running = ledger.running_tasks(batch_id)
        for name, rec in list(running.items()):
            if provably_dead(_identity(rec)):
                ledger.forget_task(name)
                del running[name]
        if not running or time.monotonic() >= deadline:
            return TaskWait(waited, running)
        waited = True
        time.sleep(0.05)


def _identity(rec: dict[str, Any]) -> DriverIdentity:
    return DriverIdentity(host=str(rec.get("host", "")), pid=int(rec.get("pid", 0)),
                          started=int(rec.get("started", 0)))
