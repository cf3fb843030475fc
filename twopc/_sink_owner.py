"""One query per sink id, recorded in the target: the owner record of sinks without a lease.

The sink id names a writer's transactions in the target, and recovery rolls back every
prepared transaction of its sink id that its own ledger does not decide. Two queries (two
checkpoints) given the same ``sinkId`` would therefore roll back each other's work. The SQL
sinks lease the sink id on their server while a writer runs (:mod:`twopc._target`); sinks
without such a lease (Redis, files, a composite of them) keep an *owner record* instead:
the first query to use a sink id records its checkpoint in the target
(:meth:`~twopc.TwoPhaseCommitSink.claim_sink_id`), and a query with another checkpoint is
refused before it touches anything. The record outlives the query on purpose: a retired
query may still have decided batches that only its checkpoint can finish.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._errors import ConcurrentWriterError

if TYPE_CHECKING:
    from ._sink import TwoPhaseCommitSink

__all__ = ["OwnerRecord", "checkpoint_label", "claim_sink_id"]


@dataclass(frozen=True)
class OwnerRecord:
    """The owner a target records for a sink id: its checkpoint label, and how an operator
    deletes the record (a command, for the error message)."""

    owner: str
    remove: str


def checkpoint_label(location: str) -> str:
    """*location* without user info (``s3a://key:secret@bucket/x`` as ``s3a://***@bucket/x``)
    and without a trailing ``/``: what an owner record holds."""
    parts = urllib.parse.urlsplit(location)
    if parts.scheme and "@" in parts.netloc:
        parts = parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1])
        location = urllib.parse.urlunsplit(parts)
    return location.rstrip("/") or location


def claim_sink_id(sink: TwoPhaseCommitSink[Any, Any, Any], sink_id: str, checkpoint_location: str) -> None:
    """Record the query of *checkpoint_location* as the owner of *sink_id* in *sink*'s
    target, or refuse the write.

    Raises:
        ConcurrentWriterError: another checkpoint is recorded (the message names both, the
            fix, and how to retire the other query's record).
        SinkError / SinkUnavailableError: the target failed.
    """
    mine = checkpoint_label(checkpoint_location)
    other = sink.claim_sink_id(sink_id, mine)
    if other is None:
        return
    raise ConcurrentWriterError(
        f"sink id {sink_id!r} on {sink.target_identity() or sink.describe()} belongs to the query whose "
        f"checkpoint is {other.owner}, and this write's checkpoint is {mine}: two queries with one sink id "
        f"would roll back each other's transactions, so nothing was written. Give this write its own sinkId "
        f"(or leave sinkId unset: it then derives from the checkpoint). If the other query is retired for "
        f"good, finish its batches (python -m recovery --checkpoint {other.owner} ...), then delete its "
        f"record: {other.remove}")
