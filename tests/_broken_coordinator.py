"""A deliberately broken coordinator, for proving that the randomized chaos suite catches it:
it commits a batch's transactions before the decision is recorded (the bug two-phase commit
exists to prevent). A crash between those commits and the decision leaves committed rows that
no ledger record explains; Spark replays the batch and they are written twice."""

from __future__ import annotations

from collections.abc import Sequence

from twopc import CommitCoordinator, CommitShape, TransactionHandle
from twopc.spi import BatchCommit, capability
from twopc.spi.operations import BatchState
from twopc.spi.runtime import BatchResult


class CommitsBeforeDecision(CommitCoordinator):
    """Commits every fresh handle of an undecided batch first, then does what the real
    coordinator does (so its ``before_decision`` fault point fires after the commits)."""

    def commit_batch(self, batch_id: int, handles: Sequence[TransactionHandle | None]) -> BatchResult:
        fresh = [h for h in handles if h is not None]
        if fresh and self.ledger.state(batch_id) is BatchState.UNDECIDED \
                and capability(self.sink, BatchCommit).commit_shape(fresh) is not CommitShape.LOCAL_TRANSACTION:
            for h in fresh:
                self.sink.commit(h)
        return super().commit_batch(batch_id, handles)
