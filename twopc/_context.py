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
        attempt_number: 0 for the first attempt of the task, 1 for the first retry, ...
    """

    sink_id: str
    batch_id: int
    partition_id: int
    attempt_id: int
    attempt_number: int = 0

    def xid(self) -> Xid:
        """A new transaction id for this attempt (fresh nonce: a retry never reuses one).

        Raises:
            ConfigurationError: the sink id cannot be part of a transaction id.
        """
        return Xid.new(self.sink_id, self.batch_id, self.partition_id, self.attempt_id)
