"""Redis two-phase-commit sink (``format("twopc-redis")``): rows become Redis writes, applied exactly once, a whole
batch in one atomic server-side call (:mod:`twopc.sinks.redis._sink`) that checks every target key before its first
write (:class:`RedisTargetError`).

Mapping: what a row becomes
---------------------------
Option ``mapping`` is a JSON list of ops (or pass :class:`RedisOp` dataclasses to
:class:`RedisSink`). Key, field, member and value *templates* use Python format syntax:
``{column}`` inserts a column's value, ``{{`` and ``}}`` are literal braces (so a Redis
hash tag is written ``{{tag}}``). Numeric parameters (``by``, ``score``, ``ttl``) are a
JSON number (a constant) or ``"{column}"`` (exactly one column)::

    [
      {"op": "SET",     "key": "{{shop}}:last:{user}", "value": "{payload}", "ttl": 3600},
      {"op": "HSET",    "key": "{{shop}}:order:{id}", "fields": {"user": "{user}", "total": "{amount}"}},
      {"op": "HSET",    "key": "{{shop}}:row:{id}", "columns": ["payload", "amount"]},
      {"op": "INCRBY",  "key": "{{shop}}:orders", "by": 1},
      {"op": "HINCRBY", "key": "{{shop}}:per_category", "field": "{category}", "by": "{qty}"},
      {"op": "XADD",    "key": "{{shop}}:events", "columns": ["id", "payload"]},
      {"op": "RPUSH",   "key": "{{shop}}:log", "value": "{id}:{payload}"},
      {"op": "ZADD",    "key": "{{shop}}:top", "member": "{user}", "score": "{amount}"}
    ]

``HSET``/``XADD`` take ``fields`` (field template -> value template) or ``columns`` (field name = column name); with
neither, every column. ``ttl`` is in seconds (1 .. 10^9). Values are written as: str as is (UTF-8), bytes raw, int in
decimal, float as Python's shortest repr, bool ``true``/``false``, date/time ISO 8601, lists/dicts as JSON. A null in
a referenced column is an error. In Python: ``RedisSink("redis://cache:6379/0", [IncrByOp("{{shop}}:orders", by=1)],
hash_tag="shop")``.

Within one transaction (one task attempt, held in the executor's memory until ``pre_commit``: use more partitions for
very large batches) SETs, HSET fields and ZADD members keep the last value, INCRBY/HINCRBY deltas are summed, XADD
entries and RPUSH values keep row order; a key written by two ops of the mapping is a
:class:`~twopc.ConfigurationError` (the effects would depend on their order). Across transactions every op keeps Redis
semantics (XADD uses ``*`` ids). The options, the server's requirements and cluster use are in the manual's Redis
page.
"""

from twopc.spi import require as _require

_require("redis", "redis", "the Redis sink (twopc-redis)")
_require("msgpack", "redis", "the Redis sink (twopc-redis)")

from .._redis.clients import dispose_clients  # noqa: E402 - after the driver check
from .._sources import RedisDataSource  # noqa: E402 - after the driver check
from ._keys import RedisKeys, key_slot  # noqa: E402 - after the driver check
from ._mapping import (  # noqa: E402 - after the driver check
    HIncrByOp,
    HSetOp,
    IncrByOp,
    RedisOp,
    RPushOp,
    SetOp,
    XAddOp,
    ZAddOp,
    mapping_json,
    parse_mapping,
)
from ._sink import RedisHandle, RedisSink, RedisTargetError  # noqa: E402 - after the driver check

__all__ = ["HIncrByOp", "HSetOp", "IncrByOp", "RPushOp", "RedisDataSource", "RedisHandle", "RedisKeys", "RedisOp",
           "RedisSink", "RedisTargetError", "SetOp", "XAddOp", "ZAddOp", "dispose_clients", "key_slot", "mapping_json",
           "parse_mapping"]
