"""The ledger's records (:mod:`twopc.ledger._ledger`): batch state, decision, target record, naming
and parsing (every record is a JSON object with a ``format``), and the task records of the abort
fence (:mod:`twopc._fence`), which a task's worker loads without the ledger."""

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
    epoch: int | None = None  # the recording driver's owner epoch (None: a ledger without owners)

    @functools.cached_property
    def txn_ids(self) -> frozenset[str]:
        """Every transaction id the decision decides (each handle's ``covered_txn_ids``), computed once."""
        return frozenset().union(*(h.covered_txn_ids() for h in self.handles))

    def to_json(self) -> str:
        body: dict[str, Any] = {"format": FORMAT, "sink_id": self.sink_id, "batch_id": self.batch_id,
                                "decided_at": self.decided_at, "handles": [encode_handle(h) for h in self.handles]}
        if self.epoch is not None:
            body["epoch"] = self.epoch
        # compact: with an indent, json encodes in Python, 10x slower (a 200-handle batch)
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, where: str) -> Decision:
        data = parse(text, where)
        return cls(sink_id=str(data["sink_id"]), batch_id=int(data["batch_id"]),
                   handles=tuple(decode_handle(h) for h in data["handles"]),
                   decided_at=float(data.get("decided_at", 0.0)), epoch=epoch_of(data))


def parse(text: str, where: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise LedgerError(f"ledger record {where} is not valid JSON: {DAMAGED_NEXT_STEP}") from exc
    if not isinstance(data, dict):
        raise LedgerError(f"ledger record {where} is not a JSON object: {DAMAGED_NEXT_STEP}")
    fmt = data.get("format")
    if fmt != FORMAT:
        raise LedgerError(f"ledger record {where} has format {fmt!r}; this twopc reads format {FORMAT}: use the twopc "
                          f"version that wrote this checkpoint")
    return data


def epoch_of(record: dict[str, Any]) -> int | None:
    """A decision record's owner epoch, read without decoding its handles (no sink import)."""
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

    target: str  # NamedTarget.target_identity
    data_source: str | None = None  # the format name (twopc-postgres)
    sink_class: str | None = None  # module:Class
    options: Mapping[str, str] | None = None  # NamedTarget.reopen_options (no secret)
    instance: str | None = None  # NamedTarget.target_instance

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> TargetRecord:
        options = data.get("options")
        return cls(str(data["target"]), _text_or_none(data.get("data_source")),
                   _text_or_none(data.get("sink_class")),
                   {str(k): str(v) for k, v in options.items()} if isinstance(options, dict) else None,
                   _text_or_none(data.get("instance")))


def _text_or_none(value: Any) -> str | None:
    return str(value) if value else None


def ledger_store(checkpoint_location: str) -> Records:
    """The ledger store in *checkpoint_location*, opened without creating folders (a task must not
    re-create a temporary ledger its driver deleted).
    Raises ConfigurationError: the ledger refuses the location."""
    from ._stores import FolderRecords, open_store  # a ledger in a checkpoint: a target's is no folder
    return FolderRecords(open_store(checkpoint_location.rstrip("/") + "/twopc"))


def ledger_exists(store: Records) -> bool:
    """Whether the ledger in *store* exists (its ``sink.json``). Raises :class:`LedgerError`."""
    return store.record("", "sink.json") is not None


def abort_marks_in(store: Records, batch_id: int) -> frozenset[str]:
    """:meth:`~twopc.CommitLedger.abort_marks` read from *store*. Raises :class:`LedgerError`."""
    prefix = record_name(batch_id).removesuffix(".json") + "."
    return frozenset(n for n in store.names("aborted") if n.startswith(prefix))


def record_task(store: Records, batch_id: int, partition: int, attempt: int, process: dict[str, Any]) -> str:
    """Record that *batch_id*'s task attempt is writing from *process* (host, pid, start time); return the record's
    name. Not forced to disk: after a crash its process is gone anyway. Raises :class:`LedgerError`."""
    name = f"{record_name(batch_id).removesuffix('.json')}.{partition}.{attempt}.{uuid.uuid4().hex[:8]}.json"
    body = {"format": FORMAT, "batch_id": batch_id, "partition": partition, "attempt": attempt, **process}
    store.put("running", name, json.dumps(body, sort_keys=True), durable=False)
    return name


def tasks_in(store: Records, batch_id: int) -> dict[str, dict[str, Any]]:
    """*batch_id*'s task attempts recorded as writing, by record name. Raises :class:`LedgerError`."""
    prefix = record_name(batch_id).removesuffix(".json") + "."
    return {n: parse(text, store.where("running", n)) for n in store.names("running")
            if n.startswith(prefix) and (text := store.record("running", n)) is not None}


def forget_task(store: Records, name: str) -> None:
    """Delete the task record *name*. Raises :class:`LedgerError`."""
    store.remove("running", name)
