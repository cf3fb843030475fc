"""The commit ledger: the protocol's durable state in ``<checkpointLocation>/twopc/``::

    sink.json, target.json          the sink id; the target (identity, instance, reopen options)
    decisions/<batch>.json          every handle of the batch, written BEFORE any commit
    committed/<batch>.json          written AFTER every handle of the batch is committed
    aborted/<batch>.<id>.json       one per abort, BEFORE its sweep (the zombie-prepare fence)
    running/<batch>.<p>.<a>.<id>.json  a task attempt that is writing (see twopc._fence)
    owners/, verdicts/              who owns the ledger (:mod:`twopc.ledger._fencing_epochs`)

A batch is UNDECIDED, DECIDED (decision, no committed mark) or COMMITTED. Records are created
atomically and a decision at most once by the location's store (:mod:`twopc.ledger._stores`);
a ``read_only`` ledger never writes, not even a folder."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError, ProtocolError, TargetMismatchError
from ._fencing_epochs import Ownership
from ._ledger_records import (
    FORMAT,
    BatchState,
    Decision,
    TargetRecord,
    abort_marks_in,
    batch_ids,
    epoch_of,
    forget_task,
    parse,
    record_name,
    tasks_in,
)

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from ._stores import Records

__all__ = ["CommitLedger", "spark_checkpoint_started"]


def spark_checkpoint_started(location: str) -> bool:
    """Whether Spark's own checkpoint (its ``metadata`` file) is at *location*.
    Raises ConfigurationError: the ledger refuses the location.
    Raises LedgerError: it cannot be read."""
    from ._stores import open_store  # a checkpoint's: a ledger in the target reads no folder
    return open_store(location).read("metadata") is not None


def same_target(label: str, instance: str | None, other_label: str, other_instance: str | None) -> bool:
    """Whether two recorded targets are one: by their servers' instances when both are known, else by identity."""
    both_known = instance is not None and other_instance is not None
    return instance == other_instance if both_known else label == other_label


def shown(label: str, instance: str | None) -> str:
    return f"[{label}]" + (f" (the server: {instance})" if instance is not None else "")


def mismatch_message(checkpoint: str, sink_id: str, recorded: tuple[str, str | None], asked: tuple[str, str | None],
                     pending: list[int]) -> str:
    """Why a write to *asked* is refused on a checkpoint of *recorded*, and what to do."""
    from .._advice import command  # a refusal's: a write to its own target is given no advice
    head = (f"checkpoint {checkpoint} (sink id {sink_id!r}) belongs to a write to {shown(*recorded)}, but "
            f"this write goes to {shown(*asked)}; nothing was written or recorded. ")
    if pending:
        return head + (
            f"Batch(es) {pending} are decided and wait prepared in the recorded target: nothing is lost. Point this "
            f"write back at that target (its URL as before), or run {command('recover', checkpoint)}: either "
            f"commits them")
    return head + (
        f"A checkpoint serves one target: give this write its own checkpointLocation (and sinkId, if you set "
        f"one); or, if this target holds the recorded one's data (a moved server), move the checkpoint to it: "
        f"{command('recover', checkpoint, '--retarget', '--option', '<key>=<value>')} with the options that differ")


class CommitLedger(Ownership):
    """The per-checkpoint record of decided and committed batches, and its
    :class:`~twopc.ledger._fencing_epochs.Ownership` (:meth:`claim`, :meth:`act_for`, :meth:`join`,
    :meth:`check_owner`, :attr:`epoch`).

    Args:
        checkpoint_location: the query's ``checkpointLocation`` (a path or a pyarrow URI); the
            ledger lives in its ``twopc/`` folder.
        filesystem: a pyarrow filesystem in which *checkpoint_location* is a path.
        store: the records' store itself (a ledger kept in the target, :mod:`twopc._target`);
            *checkpoint_location* then only names it in messages.
        read_only: never write (each write raises :class:`LedgerError`); a missing ledger reads
            as empty."""

    def __init__(self, checkpoint_location: str, *, filesystem: pafs.FileSystem | None = None,
                 epoch: int | None = None, store: Records | None = None, read_only: bool = False) -> None:
        self.checkpoint_location = checkpoint_location
        self.in_target = store is not None
        """Whether the records are kept in the target (:mod:`twopc._target`), not in a checkpoint."""
        if store is None:  # a checkpoint's: a ledger in the target is given its store
            from ._stores import FolderRecords, open_store
            folder = open_store(checkpoint_location.rstrip("/") + "/twopc", filesystem, read_only=read_only)
            store = FolderRecords(folder, make=not read_only)
        if read_only:  # twopc status, a metrics scrape
            from ._stores import ReadOnlyRecords
            store = ReadOnlyRecords(store)
        super().__init__(store, epoch, self._pending_epochs)
        self.location = store.root
        """Where the records are (the store's root)."""

    # -- ownership (see twopc.ledger._fencing_epochs) ------------------------------------------------
    def _pending_epochs(self) -> list[tuple[int, int | None]]:
        return [(b, epoch_of(data)) for b in self._unmarked() if (data := self._read("decisions", record_name(b)))]

    def _read(self, kind: str, name: str) -> dict[str, Any] | None:
        text = self._store.record(kind, name)
        return None if text is None else parse(text, self._store.where(kind, name))

    def fenced(self) -> bool:
        """Whether another driver took the ledger over since :meth:`claim`."""
        return self.newer_owner() is not None

    # -- sink id ---------------------------------------------------------------------
    def recorded_sink_id(self) -> str | None:
        """The sink id recorded in this checkpoint, or None before the first write."""
        data = self._read("", "sink.json")
        return None if data is None else str(data["sink_id"])

    def bind_sink_id(self, requested: str | None, default: str) -> str:
        """The sink id this checkpoint belongs to, recorded on first use.
        Raises ConfigurationError: *requested* differs from the id already recorded."""
        if (text := self._store.record("", "sink.json")) is None:
            chosen = requested or default
            self._store.add("", "sink.json", json.dumps({"format": FORMAT, "sink_id": chosen}))
            text = self._store.record("", "sink.json") or ""
        recorded = str(parse(text, self._store.where("", "sink.json"))["sink_id"])
        if requested and requested != recorded:
            raise ConfigurationError(f"checkpoint {self.checkpoint_location} belongs to sink id {recorded!r}, but "
                                     f"option sinkId={requested!r} was given: drop the sinkId option, or use a new "
                                     f"checkpoint location")
        return recorded

    # -- target ----------------------------------------------------------------------
    def recorded_target(self) -> str | None:
        """The recorded target identity (:meth:`bind_target`), or None."""
        return record.target if (record := self.target_record()) is not None else None

    def recorded_target_instance(self) -> str | None:
        """What the recorded target's server said it is, or None."""
        return record.instance if (record := self.target_record()) is not None else None

    def target_record(self) -> TargetRecord | None:
        """All this checkpoint records about its target, or None."""
        data = self._read("", "target.json")
        return None if data is None else TargetRecord.from_record(data)

    def _write_target(self, record: TargetRecord, *, exclusive: bool) -> None:
        body: dict[str, Any] = {"format": FORMAT, "target": record.target}
        reach = {"instance": record.instance, "data_source": record.data_source, "sink_class": record.sink_class,
                 "options": dict(record.options) if record.options is not None else None}
        body.update({k: v for k, v in reach.items() if v is not None})
        if exclusive:
            self._store.add("", "target.json", json.dumps(body, sort_keys=True))
        else:
            self._store.put("", "target.json", json.dumps(body, sort_keys=True), durable=True)

    def bind_target(self, identity: str | None, sink_id: str, *, record: bool = True,
                    instance: str | None = None, data_source: str | None = None,
                    sink_class: str | None = None, options: Mapping[str, str] | None = None) -> None:
        """Record *identity* and *instance* on the checkpoint's first use, and refuse another target
        later; ``record=False`` only refuses (the runtime records after validation, so a mistyped table
        is not recorded); ``None`` does nothing. The first record also keeps *data_source*,
        *sink_class* and secret-free *options*, so ``twopc status`` needs only the secrets. Targets are
        the same by instance when both are known (``localhost`` = ``127.0.0.1``), else by identity. A
        checkpoint with a decided batch waiting records nothing until recovery finishes it (where it
        was prepared is unknown).
        Raises TargetMismatchError: another target is recorded: this checkpoint's decided batches, batch
        ids and sink id belong to it."""
        if identity is None:
            return
        if (recorded := self.target_record()) is None:
            if not record or self.pending():
                return
            self._write_target(TargetRecord(identity, data_source, sink_class, options, instance), exclusive=True)
            recorded = self.target_record() or TargetRecord(identity, instance=instance)
        label, known = recorded.target, recorded.instance
        if same_target(label, known, identity, instance):
            if record and known is None and instance is not None and label == identity and not self.pending():
                # learn what the server says it is
                self._write_target(dataclasses.replace(
                    recorded, instance=instance, data_source=recorded.data_source or data_source,
                    sink_class=recorded.sink_class or sink_class,
                    options=recorded.options if recorded.options is not None else options), exclusive=False)
            return
        raise TargetMismatchError(mismatch_message(self.checkpoint_location, sink_id, (label, known),
                                                   (identity, instance), [d.batch_id for d in self.pending()]))

    def retarget(self, identity: str, sink_id: str, *, instance: str | None = None,
                 options: Mapping[str, str] | None = None) -> str | None:
        """Record *identity* (``twopc recover --retarget``) with the new target's secret-free *options*
        in place of the recorded one; return the identity recorded before (or None).
        Raises TargetMismatchError: a decided batch still waits in the recorded target."""
        recorded = self.target_record()
        pending = [d.batch_id for d in self.pending()]
        if pending and (recorded is None or not same_target(recorded.target, recorded.instance, identity, instance)):
            from .._advice import command  # as in mismatch_message
            where = (shown(recorded.target, recorded.instance) if recorded is not None
                     else "the target the checkpoint was written to")
            raise TargetMismatchError(
                f"checkpoint {self.checkpoint_location} (sink id {sink_id!r}) has decided batch(es) {pending} "
                f"whose transactions wait prepared in {where}: it cannot move to {shown(identity, instance)} "
                f"now; nothing was changed. Finish them first: {command('recover', self.checkpoint_location)} "
                f"commits them in the recorded target; only if it is gone for good, restore their rows and mark "
                f"each batch done ({command('recover', self.checkpoint_location, '--accept-lost', str(pending[0]))})"
                f"; then retarget")
        kept = recorded or TargetRecord(identity)
        moved = TargetRecord(identity, kept.data_source, kept.sink_class, options, instance)
        self._write_target(moved, exclusive=False)
        return None if recorded is None else recorded.target

    # -- batches ---------------------------------------------------------------------
    def state(self, batch_id: int) -> BatchState:
        if self._store.record("committed", record_name(batch_id)) is not None:
            return BatchState.COMMITTED
        data = self._read("decisions", record_name(batch_id))
        return BatchState.DECIDED if data is not None and self.valid(batch_id, epoch_of(data)) else BatchState.UNDECIDED

    def _raw_decision(self, batch_id: int) -> Decision | None:
        text = self._store.record("decisions", record_name(batch_id))
        return None if text is None else Decision.from_json(text, self._store.where("decisions", record_name(batch_id)))

    def decision(self, batch_id: int) -> Decision | None:
        """The decision that stands for *batch_id* (a fenced driver's void one counts as none), or None."""
        return self._standing(batch_id)[0]

    def _standing(self, batch_id: int) -> tuple[Decision | None, bool]:
        """The standing decision and whether the batch is marked committed. The mark is read first: a
        committed decision is never replaced, while a void one read just before its replacement was
        committed would otherwise pass for the committed one."""
        committed = self._store.record("committed", record_name(batch_id)) is not None
        d = self._raw_decision(batch_id)
        if d is None or committed or self.valid(batch_id, d.epoch):
            return d, committed
        return None, False

    def record_decision(self, decision: Decision) -> Decision:
        """Durably record *decision* unless the batch has one (a fenced driver's void one is replaced);
        return the one that stands. Must complete before any handle is committed.
        Raises FencedError: another driver took the ledger over: nothing may be committed.
        Raises ProtocolError: a different decision is already recorded for the batch."""
        if self.epoch is not None:
            decision = dataclasses.replace(decision, epoch=self.epoch)
        name = record_name(decision.batch_id)
        while True:
            if self._store.write_decision(name, decision.to_json()):
                self.check_owner()
                return decision
            if (existing := self._raw_decision(decision.batch_id)) is None:
                continue
            if self.decision(decision.batch_id) is None:  # void: its driver was fenced and stopped
                self._store.remove("decisions", name)
                continue
            self.check_owner()
            if existing.txn_ids != decision.txn_ids:
                raise ProtocolError(f"batch {decision.batch_id} already has a different decision in {self.location}")
            return existing

    def mark_committed(self, batch_id: int, *, summary: dict[str, Any] | None = None) -> None:
        """Record that every handle of *batch_id* is committed (idempotent)."""
        body = {"format": FORMAT, "batch_id": batch_id, "committed_at": time.time(), **(summary or {})}
        self._store.add("committed", record_name(batch_id), json.dumps(body, sort_keys=True))

    # -- the zombie-prepare fence -----------------------------------------------------------
    def record_abort(self, batch_id: int) -> str:
        """Durably record, BEFORE the sweep, that this run of *batch_id* aborts (the *zombie-prepare
        window* of :mod:`twopc._fence`); a new record each time. Returns its name.
        Raises LedgerError: the store fails."""
        name = f"{record_name(batch_id).removesuffix('.json')}.{time.time_ns():x}{uuid.uuid4().hex[:8]}.json"
        body = {"format": FORMAT, "batch_id": batch_id, "aborted_at": time.time()}
        self._store.add("aborted", name, json.dumps(body))
        return name

    def abort_marks(self, batch_id: int) -> frozenset[str]:
        """The names of *batch_id*'s abort records. Raises :class:`LedgerError` when the store fails."""
        return abort_marks_in(self._store, batch_id)

    def abort_records(self) -> frozenset[str]:
        """Every abort record's name (noted when a writer is planned; see :mod:`twopc._fence`).
        Raises :class:`LedgerError` when the store fails."""
        return frozenset(self._store.names("aborted"))

    def running_tasks(self, batch_id: int) -> dict[str, dict[str, Any]]:
        """*batch_id*'s task attempts recorded as writing. Raises :class:`LedgerError`."""
        return tasks_in(self._store, batch_id)

    def forget_task(self, name: str) -> None:
        """Delete the task record *name* (its process is gone). Raises :class:`LedgerError`."""
        forget_task(self._store, name)

    def decided_batches(self) -> list[int]:
        return batch_ids(self._store.names("decisions"))

    def committed_batches(self) -> list[int]:
        return batch_ids(self._store.names("committed"))

    def pending(self) -> list[Decision]:
        """Decisions whose batch is not marked committed, oldest first."""
        standing = [self._standing(b) for b in self._unmarked()]
        return [d for d, done in standing if d is not None and not done]  # a fenced driver's void one is not

    def _unmarked(self) -> list[int]:
        committed = set(self.committed_batches())
        return [b for b in self.decided_batches() if b not in committed]

    def latest_committed(self) -> int | None:
        batches = self.committed_batches()
        return batches[-1] if batches else None

    def decisions(self, batch_ids: Sequence[int] | None = None) -> list[Decision]:
        ids = self.decided_batches() if batch_ids is None else batch_ids
        return [d for b in ids if (d := self.decision(b)) is not None]

    def purge(self, *, keep_last: int) -> list[int]:
        """Delete committed batches' records but the *keep_last* newest; return their ids. Decided but
        uncommitted batches are kept."""
        committed = self.committed_batches()
        if keep_last < 1 or len(committed) <= keep_last:
            return []
        victims = committed[: len(committed) - keep_last]
        for b in victims:
            self._store.remove("decisions", record_name(b))
            self._store.remove("committed", record_name(b))
        oldest_kept = committed[len(committed) - keep_last]
        for folder in ("aborted", "running"):  # aborts (and dead tasks) of batches older than every retained one
            for n in self._store.names(folder):
                stem = n.split(".", 1)[0]
                if stem.isdigit() and int(stem) < oldest_kept:
                    self._store.remove(folder, n)
        return victims

    # -- auxiliary state (twopc's metrics) ----------------------------------------------
    def read_aux(self, name: str) -> str | None:
        """The auxiliary record *name* (a plain file name), or None."""
        return self._store.record("", _aux_name(name))

    def write_aux(self, name: str, text: str) -> None:
        """Replace the auxiliary record *name* atomically, without fsync (a crash may lose the last
        update, never tear it).
        Raises LedgerError: it cannot be written."""
        self._store.put("", _aux_name(name), text, durable=False)


def _aux_name(name: str) -> str:
    """*name*, checked to be an auxiliary record's, not the protocol's."""
    if "/" in name or name in ("sink.json", "target.json"):
        raise ValueError(f"{name!r} is not an auxiliary record name")
    return name
