"""The records of the commit ledger (:mod:`twopc.ledger._ledger`): a batch's state, the driver's
decision, what a checkpoint records about its target (``twopc/target.json``; the ledger
compares two, :meth:`twopc.CommitLedger.bind_target`), and how records are named and read
back (every record is a JSON object with a ``format``); and the records a task attempt reads
and writes in the ledger's store through its abort fence (:mod:`twopc._fence`), which a
task's worker loads without the ledger itself."""

from __future__ import annotations

import enum
import functools
import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import DAMAGED_NEXT_STEP, LedgerError
from .._handle import TransactionHandle, decode_handle, encode_handle

if TYPE_CHECKING:
    from ._stores import Records

__all__ = ["FORMAT", "BatchState", "Decision", "TargetRecord", "abort_marks_in", "batch_ids", "epoch_of",
           "forget_task", "ledger_exists", "ledger_store", "parse", "record_name", "record_task", "tasks_in"]

#: the format of every ledger record this twopc writes and reads
FORMAT = 1


class BatchState(enum.Enum):
    """Where a batch stands in the ledger."""

    UNDECIDED = "undecided"
    DECIDED = "decided"
    COMMITTED = "committed"


@dataclass(frozen=True)
class Decision:
    """The driver's decision to commit a batch: exactly these handles, all of them."""

    sink_id: str
    batch_id: int
    handles: tuple[TransactionHandle, ...]
    decided_at: float = field(default_factory=time.time)
    epoch: int | None = None
    """The owner epoch of the driver that recorded it (None: a ledger without owners)."""

    @functools.cached_property
    def txn_ids(self) -> frozenset[str]:
        """Every transaction id the decision decides (each handle's ``covered_txn_ids``);
        computed once (callers test every handle of a batch against it)."""
        return frozenset().union(*(h.covered_txn_ids() for h in self.handles))

    def to_json(self) -> str:
        body: dict[str, Any] = {
            "format": FORMAT,
            "sink_id": self.sink_id,
            "batch_id": self.batch_id,
            "decided_at": self.decided_at,
            "handles": [encode_handle(h) for h in self.handles],
        }
        if self.epoch is not None:
            body["epoch"] = self.epoch
        # compact: with an indent, json encodes in Python, 10x slower (a 200-handle batch)
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, where: str) -> Decision:
        data = parse(text, where)
        return cls(
            sink_id=str(data["sink_id"]),
            batch_id=int(data["batch_id"]),
            handles=tuple(decode_handle(h) for h in data["handles"]),
            decided_at=float(data.get("decided_at", 0.0)),
            epoch=epoch_of(data),
        )


def parse(text: str, where: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise LedgerError(f"ledger record {where} is not valid JSON: {DAMAGED_NEXT_STEP}") from exc
    if not isinstance(data, dict):
        raise LedgerError(f"ledger record {where} is not a JSON object: {DAMAGED_NEXT_STEP}")
    fmt = data.get("format")
    if fmt != FORMAT:
        raise LedgerError(
            f"ledger record {where} has format {fmt!r}; this twopc reads format {FORMAT}: "
            f"use the twopc version that wrote this checkpoint"
        )
    return data


def epoch_of(record: dict[str, Any]) -> int | None:
    """A decision record's owner epoch, read without decoding its handles (so that any sink's
    ledger can be judged without importing the sink)."""
    epoch = record.get("epoch")
    return int(epoch) if epoch is not None else None


def record_name(batch_id: int) -> str:
    if batch_id < 0:
        raise ValueError(f"batch id must be >= 0, got {batch_id}")
    return f"{batch_id:020d}.json"


def batch_ids(names: Iterable[str]) -> list[int]:
    return sorted(int(stem) for n in names if (stem := n.removesuffix(".json")) != n and stem.isdigit())


@dataclass(frozen=True)
class TargetRecord:
    """What a checkpoint's ``target.json`` records (:meth:`CommitLedger.bind_target`)."""

    target: str
    """What the sink writes to (:meth:`~twopc.spi.NamedTarget.target_identity`)."""
    data_source: str | None = None
    """The format name the write used (``twopc-postgres``); None when not recorded."""
    sink_class: str | None = None
    """``module:Class`` of its sink; None when not recorded."""
    options: Mapping[str, str] | None = None
    """Its writer options without any secret (:meth:`~twopc.spi.NamedTarget.reopen_options`);
    None when the sink does not tell them."""
    instance: str | None = None
    """What its server said it is (:meth:`~twopc.spi.NamedTarget.target_instance`); None when
    the sink cannot tell."""

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> TargetRecord:
        """The record parsed from ``target.json``'s JSON object *data*."""
        options = data.get("options")
        return cls(str(data["target"]), _text_or_none(data.get("data_source")),
                   _text_or_none(data.get("sink_class")),
                   {str(k): str(v) for k, v in options.items()} if isinstance(options, dict) else None,
                   _text_or_none(data.get("instance")))


def _text_or_none(value: Any) -> str | None:
    return str(value) if value else None


def ledger_store(checkpoint_location: str) -> Records:
    """The store of the ledger in *checkpoint_location*, opened without creating its folders
    (a task must not re-create a temporary ledger its driver deleted).

    Raises:
        ConfigurationError: the location is one the ledger refuses (see :mod:`twopc.ledger._stores`).
    """
    from ._stores import FolderRecords, open_store  # a ledger in a checkpoint: a target's is no folder
    return FolderRecords(open_store(checkpoint_location.rstrip("/") + "/twopc"))


def ledger_exists(store: Records) -> bool:
    """Whether the ledger in *store* exists (its ``sink.json``, written when a write binds its
    sink id and deleted only with the whole ledger).

    Raises:
        LedgerError: the store fails.
    """
    return store.record("", "sink.json") is not None


def abort_marks_in(store: Records, batch_id: int) -> frozenset[str]:
    """:meth:`~twopc.CommitLedger.abort_marks` read from the ledger's *store* directly.

    Raises:
        LedgerError: the store fails.
    """
    prefix = record_name(batch_id).removesuffix(".json") + "."
    return frozenset(n for n in store.names("aborted") if n.startswith(prefix))


def record_task(store: Records, batch_id: int, partition: int, attempt: int, process: dict[str, Any]) -> str:
    """Record that task attempt *attempt* (partition *partition*) of *batch_id* is writing, from
    *process* (its host, pid and start time); return the record's name for :func:`forget_task`.
    Not forced to disk: after a crash no task runs, and a record left behind only names a
    process that is gone.

    Raises:
        LedgerError: the store fails.
    """
    name = f"{record_name(batch_id).removesuffix('.json')}.{partition}.{attempt}.{uuid.uuid4().hex[:8]}.json"
    body = {"format": FORMAT, "batch_id": batch_id, "partition": partition, "attempt": attempt, **process}
    store.put("running", name, json.dumps(body, sort_keys=True), durable=False)
    return name


def tasks_in(store: Records, batch_id: int) -> dict[str, dict[str, Any]]:
    """The task attempts of *batch_id* recorded as writing (:func:`record_task`), by record name
    (a record deleted while this reads is left out).

    Raises:
        LedgerError: the store fails.
    """
    prefix = record_name(batch_id).removesuffix(".json") + "."
    out = {}
    for n in store.names("running"):
        if n.startswith(prefix) and (text := store.record("running", n)) is not None:
            out[n] = parse(text, store.where("running", n))
    return out


def forget_task(store: Records, name: str) -> None:
    """Delete the task record *name* (:func:`record_task`).

    Raises:
        LedgerError: the store fails.
    """
    store.remove("running", name)
