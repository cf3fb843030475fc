"""Where a transaction comes from: sink, batch, partition and task attempt."""

from __future__ import annotations

from dataclasses import dataclass

from ._xid import Xid

__all__ = ["TransactionContext"]


@dataclass(frozen=True, slots=True)
class TransactionContext:
    """Identifies one task attempt's transaction.

    Attributes:
        sink_id: stable id of the sink (one streaming query or one batch writer).
        batch_id: Spark's micro-batch id, or the user's ``txnVersion`` for batch writes.
        partition_id: the Spark partition the task writes.
        attempt_id: Spark's task attempt id, unique within one application run.
        attempt_number: 0 for the task's first attempt, 1 for the first retry, ...
        nonce: the nonce :meth:`xid` uses (8 lower-case hex digits); ``None`` draws a fresh one per
            call. A composite gives its participants the attempt's nonce, tying their ids together."""

    sink_id: str
    batch_id: int
    partition_id: int
    attempt_id: int
    attempt_number: int = 0
    nonce: str | None = None

    def xid(self) -> Xid:
        """A new transaction id for this attempt (fresh nonce, or :attr:`nonce` when set).
        Raises ConfigurationError: the sink id cannot be part of a transaction id.
        Raises ProtocolError: :attr:`nonce` is not 8 lower-case hex digits."""
        if self.nonce is not None:
            return Xid(self.sink_id, self.batch_id, self.partition_id, self.attempt_id, self.nonce)
        return Xid.new(self.sink_id, self.batch_id, self.partition_id, self.attempt_id)
