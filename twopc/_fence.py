"""The task side of the zombie-prepare fence (the driver side is
:meth:`CommitCoordinator.abort_batch`, through :meth:`CommitLedger.record_abort`).

The *zombie-prepare window*: when a task of a batch fails for good, Spark aborts the job
while its siblings may still run (Spark asks them to stop, and a Python worker is killed
only ``spark.python.task.killTimeout`` later; an executor cut off from the driver runs on
longer). The driver's abort rolls back every prepared transaction of the batch it can
list; a sibling that prepares after that listing would stay prepared (holding locks,
holding back VACUUM, taking a ``max_prepared_transactions`` slot) until the next write.

The fence: the driver records the abort in the ledger BEFORE it sweeps; a task notes the
batch's abort records when it begins and looks again AFTER it prepared. A new record means
its job was aborted while it ran: it rolls its own transaction back and raises
:class:`BatchAbortedError`. Prepared before the record: the sweep finds it. Prepared after:
the task sees the record. A later run of the same batch id (a rerun with the same
``txnVersion``, a replayed micro-batch) began after the old records and is not affected.

The records live wherever the write's ledger does: under the checkpoint's ``twopc/aborted/``,
or, for a write whose ledger is in the target (:mod:`twopc._target`), as rows of the
target's ledger table on the server of the prepared transactions; one rule for both, read
through the ledger's store.

A write without a checkpoint (a temporary ledger on the driver's machine, or its records in
the target) deletes its ledger when it ends (an ``eph-`` write: its driver, or the next
write that resolves it once its driver is gone): a task that finds the ledger gone after
preparing knows its job ended without it (aborted, or it is a losing speculative copy) and
rolls back too. A temporary ledger on another machine cannot be read: there such writes
have no fence; their sinks commit a batch in one local transaction, so what a zombie leaves
is only staged, and later writes delete it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ._errors import ConfigurationError, LedgerError
from ._ledger import abort_marks_in, ledger_exists
from ._stores import Store

__all__ = ["AbortFence"]

log = logging.getLogger("twopc.spark")


@dataclass(frozen=True)
class AbortFence:
    """What one task attempt saw of its batch's abort records when it began."""

    store: Store | None
    """The ledger's store (:func:`twopc._ledger.ledger_store`, or a target ledger's), ``None``:
    no fence (the ledger is not readable here)."""
    batch_id: int
    seen: frozenset[str]
    ephemeral: bool
    """The write deletes its ledger when it ends (no checkpoint): a ledger gone = job ended."""

    @classmethod
    def begin(cls, open_store: Callable[[], Store], where: str, batch_id: int, *, ephemeral: bool) -> AbortFence:
        """Note the abort records of *batch_id* in the ledger's store (*open_store*'s; *where*
        names it) now, before the task writes. Never raises: a ledger this process cannot
        read gives a fence that never fires (logged)."""
        none = cls(None, batch_id, frozenset(), ephemeral)
        try:
            store = open_store()
            if ephemeral and not ledger_exists(store):  # another machine's temporary ledger
                return none
            return cls(store, batch_id, abort_marks_in(store, batch_id), ephemeral)
        except (LedgerError, ConfigurationError, OSError) as exc:
            log.warning("twopc: cannot read the ledger in %s from this task (%s): if its job is aborted while it "
                        "runs, its prepared transaction is left for the next batch or start", where, exc)
            return none

    def aborted(self) -> bool:
        """Whether the task's job was aborted (or, without a checkpoint, ended) since
        :meth:`begin`. Call it after the transaction is prepared.

        Raises:
            LedgerError: the ledger cannot be read now (the caller rolls back: unsure).
        """
        if self.store is None:
            return False
        if self.ephemeral and not ledger_exists(self.store):
            return True
        return bool(abort_marks_in(self.store, self.batch_id) - self.seen)
