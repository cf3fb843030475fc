"""What a checkpoint records about its target (``twopc/target.json``), and how two recorded
targets are compared and shown (see :meth:`twopc.CommitLedger.bind_target`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["TargetRecord", "mismatch_message", "same_target", "shown"]


@dataclass(frozen=True)
class TargetRecord:
    """What a checkpoint's ``target.json`` records (:meth:`CommitLedger.bind_target`)."""

    target: str
    """What the sink writes to (:meth:`~twopc.TwoPhaseCommitSink.target_identity`)."""
    data_source: str | None = None
    """The format name the write used (``twopc-postgres``); None when not recorded."""
    sink_class: str | None = None
    """``module:Class`` of its sink; None when not recorded."""
    options: Mapping[str, str] | None = None
    """Its writer options without any secret (:meth:`~twopc.TwoPhaseCommitSink.reopen_options`);
    None when the sink does not tell them."""
    instance: str | None = None
    """What its server said it is (:meth:`~twopc.TwoPhaseCommitSink.target_instance`); None when
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
    to do: point it back while decided batches (*pending*) wait there, else its own checkpoint
    or a retarget."""
    old, new = shown(*recorded), shown(*asked)
    head = (f"checkpoint {checkpoint} (sink id {sink_id!r}) belongs to a write to {old}, but "
            f"this write goes to {new}: another server, database or table (the same server reached under "
            f"another name is the same target where the server tells what it is). Nothing was written or "
            f"recorded. ")
    retarget = (f"twopc recover recover --checkpoint {checkpoint} --retarget --format "
                f"<the write's format> --option key=value ... (the options of the write to the new target)")
    if pending:
        accept = " ".join(f"--accept-lost {b}" for b in pending)
        return head + (
            f"Batch(es) {pending} are decided and their transactions wait prepared in {old}: nothing is lost. "
            f"Point this write back at {old} (its URL as before) and it commits them first. Only if that "
            f"target is gone for good are their rows lost: restore them by other means, mark each batch done "
            f"(twopc recover recover --checkpoint {checkpoint} {accept}, one command per "
            f"batch), then move the checkpoint to the new target: {retarget}")
    return head + (
        f"A checkpoint's committed batches (txnVersion) and sink id serve one target, so this write would be "
        f"skipped or mixed up with the other one's. Give this write its own checkpointLocation (and sinkId, "
        f"if you set one); or, if the new target holds the old one's data (a moved server), move the "
        f"checkpoint to it: {retarget}")
