"""``twopc-http``: one HTTP request per row, sent exactly once, only for decided batches.

Prepare stores, commit sends. A task turns its rows into requests and writes them whole as
its outbox under the checkpoint (``<checkpointLocation>/twopc-http``, local or ``s3://``):
that is its prepare, and nothing is sent. Once the driver has recorded its decision, it
delivers the batch's outboxes with bounded concurrency, records what was answered, and
marks each outbox delivered; a crash re-delivers only what was not acknowledged. An aborted
batch's outboxes are deleted: nothing sent, nothing left.

Each request carries an idempotency key (``Idempotency-Key``, option ``keyHeader``) made
when the row is prepared and stored with it, so every retry and re-delivery sends the same
key: a server that honours keys (the IETF ``Idempotency-Key`` draft) applies each request
once. Against a server that ignores them, only a request whose answer was lost to a crash
(in flight, or answered and not yet recorded) can be applied twice; ``twopc status`` lists
the keys of such requests. httpx (the ``pyspark-twopc[http]`` extra) is needed on the
driver only.
"""

from .._handles import HttpHandle
from ._options import OPTIONS, HttpOptions, checkpoint_outbox
from ._sink import HttpSink

__all__ = ["OPTIONS", "HttpHandle", "HttpOptions", "HttpSink", "checkpoint_outbox"]
