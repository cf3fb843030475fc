"""Redis plumbing shared by the Redis sink (:mod:`twopc.sinks.redis`) and the Redis Stream source
(:mod:`twopc.sinks.redis_source`), which import it and never each other.

Modules, each with one job: ``clients`` (connection settings, URL and password, one pooled
client per process, :func:`~twopc.sinks._redis.clients.dispose_clients`), ``library`` (building a
FUNCTION library, telling that the server lost one), ``ids`` (stream entry ids and ranges),
``stream_lua`` (the source's ``twopc_stream_v2`` library, whose ``ack`` step the sink's
``ackGroup`` commit embeds) and ``stream_server`` (the stream commands: the source's, and
the consumer groups the sink's ``ackGroup`` checks). They need redis-py: importing any of
them without it is a :class:`~twopc.MissingExtraError` naming the extra.
"""

from twopc.spi import require as _require

_require("redis", "redis", "twopc's Redis support (twopc-redis, twopc-redis-stream)")
