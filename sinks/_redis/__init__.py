"""Redis plumbing shared by the Redis sink and the Redis Stream source, which never import each
other. Without redis-py, importing it is a :class:`~twopc.MissingExtraError` naming the extra."""

from twopc.spi import require as _require

_require("redis", "redis", "twopc's Redis support (twopc-redis, twopc-redis-stream)")
