"""Redis Streams into Spark, exactly once: ``spark.readStream.format("twopc-redis-stream")``.

A micro-batch's range (the last entry id per stream, and how many entries) is fixed in
Spark's offset log before it runs; every read of it, first or replay, is ``XRANGE`` over
that range, so a replay after a crash sees exactly the same entries. The consumer group
named by ``group`` mirrors the query's committed progress: it moves (``last-delivered-id``
forward, ``XACK`` of pending entries up to the batch's end) only in the source's
``commit(end)``, which Spark calls after the sink committed and its commit log was
written. With a two-phase-commit sink (``twopc-postgres``, ``twopc-jdbc``,
``twopc-redis``) every entry's effect is applied exactly once; the rows carry the stream
key and the entry id, a deterministic idempotency key for the sink. Needs Redis 7.0+ and
PySpark 4.2+.
"""

from twopc.spi import require as _require

_require("redis", "redis", "the Redis Stream source (twopc-redis-stream)")

from .._redis.ids import EntryId, Range  # noqa: E402 - after the driver check
from .._redis.stream_lua import LIBRARY_NAME  # noqa: E402 - after the driver check
from .._redis.stream_server import StreamServer  # noqa: E402 - after the driver check
from ._ids import Offset, Position  # noqa: E402 - after the driver check
from ._read_options import FORMAT_NAME, OPTIONS, StreamOptions, check_pyspark  # noqa: E402 - after the driver check
from ._reader import FAULT_POINTS, RedisStreamReader, StreamPartition  # noqa: E402 - after the driver check
from ._rows import BASE_DDL, schema_ddl  # noqa: E402 - after the driver check

__all__ = [
    "BASE_DDL",
    "FAULT_POINTS",
    "FORMAT_NAME",
    "LIBRARY_NAME",
    "OPTIONS",
    "EntryId",
    "Offset",
    "Position",
    "Range",
    "RedisStreamReader",
    "StreamOptions",
    "StreamPartition",
    "StreamServer",
    "check_pyspark",
    "schema_ddl",
]

