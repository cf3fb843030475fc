"""Redis Streams into Spark, exactly once: ``spark.readStream.format("twopc-redis-stream")``.

A micro-batch's range (last entry id and count per stream) is fixed in Spark's offset log before it runs, and every
read of it is ``XRANGE`` over that range, so a replay sees the same entries. The consumer ``group`` moves only in
``commit(end)``, after the sink and Spark's commit log committed. With a two-phase-commit sink every entry's effect is
applied exactly once. Needs Redis 7.0+ and PySpark 4.2+.
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

__all__ = ["BASE_DDL", "FAULT_POINTS", "FORMAT_NAME", "LIBRARY_NAME", "OPTIONS", "EntryId", "Offset", "Position",
           "Range", "RedisStreamReader", "StreamOptions", "StreamPartition", "StreamServer", "check_pyspark",
           "schema_ddl"]

