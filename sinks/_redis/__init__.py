"""Redis plumbing shared by the Redis sink (:mod:`twopc.sinks.redis`) and the Redis Stream source
(:mod:`twopc.sinks.redis_source`), which import it and never each other. Importing it without
redis-py is a :class:`~twopc.MissingExtraError` naming the extra.
"""

from twopc.spi import require as _require

_require("redis", "redis", "twopc's Redis support (twopc-redis, twopc-redis-stream)")
