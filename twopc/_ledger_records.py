"""The records of the commit ledger (:mod:`twopc._ledger`): a batch's state, the driver's
decision, what a checkpoint records about its target (``twopc/target.json``) and how two
recorded targets are compared and shown (see :meth:`twopc.CommitLedger.bind_target`), and how
records are named and read back (every record is a JSON object with a ``format``)."""

from __future__ import annotations

import enum
import functools
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._advice import command
from ._errors import DAMAGED_NEXT_STEP, LedgerError
from ._handle import TransactionHandle, decode_handle, encode_handle

__all__ = ["FORMAT", "BatchState", "Decision", "TargetRecord", "batch_ids", "epoch_of", "mismatch_message", "parse",
           "record_name", "same_target", "shown"]

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


def same_target(label: str, instance: str | None, other_label: str, other_instance: str | None) -> bool:
    """Whether two recorded targets are one: by what their servers say they are when both
    are known, else by their identities (see :meth:`CommitLedger.bind_target`)."""
    if instance is not None and other_instance is not None:
        return instance == other_instance
    return label == other_label


def shown(label: str, instance: str | None) -> str:
    """A target for messages: ``[<identity>]``, and what its server said it is when known."""
    return f"[{label}]" + (f" (the server: {instance})" if instance is not None else "")


def mismatch_message(checkpoint: str, sink_id: str, recorded: tuple[str, str | None], asked: tuple[str, str | None],
                     pending: list[int]) -> str:
    """Why a write to *asked* is refused on *checkpoint*, whose target is *recorded*, and what
    to do: finish the decided batches (*pending*) there, else give the write its own
    checkpoint or move this one."""
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
