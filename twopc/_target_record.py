"""What a checkpoint records about its target (``twopc/target.json``), and how two recorded
targets are compared and shown (see :meth:`twopc.CommitLedger.bind_target`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._advice import command

__all__ = ["TargetRecord", "mismatch_message", "same_target", "shown"]


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
