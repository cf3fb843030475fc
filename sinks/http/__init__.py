"""``twopc-http``: one HTTP request per row, sent exactly once, only for decided batches.

Prepare stores, commit sends: a task writes its rows' requests whole as its outbox under the checkpoint
(``<checkpointLocation>/twopc-http``, local or ``s3://``) and sends nothing; once the batch is decided the driver
delivers the outboxes, records the answers and marks each outbox delivered, so a crash re-delivers only what was not
acknowledged. An aborted batch's outboxes are deleted. Each request carries an idempotency key (``Idempotency-Key``,
option ``keyHeader``) stored with it, the same in every retry: a server that honours keys applies each request once;
against one that ignores them only a request whose answer was lost to a crash can apply twice (``twopc status`` lists
their keys). httpx (``pyspark-twopc[http]``) is needed on the driver only."""

from .._handles import HttpHandle
from ._options import OPTIONS, HttpOptions, checkpoint_outbox
from ._sink import HttpSink

__all__ = ["OPTIONS", "HttpHandle", "HttpOptions", "HttpSink", "checkpoint_outbox"]
