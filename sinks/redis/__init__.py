"""Redis two-phase-commit sink (``format("twopc-redis")``): rows become Redis writes,
applied exactly once.

Each task attempt's writes are folded in memory, staged under the sink's hash tag at
``pre_commit``, and applied on the driver, the whole batch in one atomic, idempotent
server-side call (a FUNCTION of the library ``twopc_redis_batch_v1``, which survives a
restart; EVALSHA scripts on Redis < 7; one call per hash tag and per 512 transactions).
:mod:`twopc.sinks.redis._sink` describes the protocol step by step. Transaction ids
are twopc's :class:`~twopc.Xid`, ``twopc:{sink}:{batch}:{partition}:{attempt}:{nonce}``
(the ``~``-separated ids that versions before 0.2 wrote are still read).

A Lua error does not roll back earlier writes, so nothing in the commit can fail after
its first write: value types are validated on the executor before staging, and the commit
checks the type of every target key (and that counters hold integers within +-10^18;
deltas are bounded by +-10^18 per transaction) before applying anything. A violation is a
:class:`RedisTargetError` (a :class:`~twopc.SinkError`) naming the key, its type and the
op, with nothing applied and the staging kept. ``pre_commit`` runs the same checks, so a
bad target usually fails the task, before any decision.

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

``HSET``/``XADD`` take ``fields`` (field template -> value template) or ``columns`` (field
name = column name); with neither, every column. ``ttl`` is in seconds (1 .. 10^9).
Values are written as: str as is (UTF-8), bytes raw, int in decimal, float as Python's
shortest repr, bool ``true``/``false``, date/time ISO 8601, lists/dicts as JSON. A null in
a referenced column is an error. Python API::

    RedisSink("redis://cache:6379/0", [IncrByOp("{{shop}}:orders", by=1),
                                        HSetOp("{{shop}}:row:{id}", columns=("payload",))],
              hash_tag="shop")

A transaction's effects are held (folded) in the executor's memory until ``pre_commit``
stages them, so a task needs memory in proportion to the distinct keys/fields it writes
plus its XADD/RPUSH values; use more partitions for very large batches.
Within one transaction (one Spark task attempt), effects are folded before staging: SETs,
HSET fields and ZADD members keep the last value per key/field/member, INCRBY/HINCRBY
deltas are summed, XADD entries and RPUSH values keep row order. Each target key may be
written by only one op of the mapping within a transaction (two ops on one key is a
:class:`~twopc.ConfigurationError`): effects of different ops could otherwise depend on
their order. Across transactions every op keeps Redis semantics (XADD uses ``*`` ids).

Options (keys case-insensitive)
-------------------------------
=====================  ============================================================
``url``                ``redis://[user[:password]@]host:port/db`` or ``rediss://``
``password``           overrides the URL's password (never logged nor stored)
``mapping``            the JSON mapping above (required)
``hashTag``            the tag of the sink's keys, ``{shop}`` or ``shop``; default
                       ``{twopc:<sink id>}``
``requireSameSlot``    ``auto`` (default: when ``INFO cluster`` says cluster_enabled:1),
                       ``true`` or ``false``: refuse target keys outside the tag's slot
``durability``         ``always`` (default: needs ``appendonly yes`` and ``appendfsync
                       always``) or ``everysec`` (accepts ``appendfsync everysec``; an
                       OS crash can lose ~1 s of writes: prepared staging or commits)
``skipConfigCheck``    ``true`` when CONFIG is disabled (managed Redis): you vouch for
                       AOF + fsync always and ``maxmemory-policy noeviction``
``scriptMode``         ``auto`` (FUNCTION on Redis >= 7, else EVALSHA), ``function``,
                       ``eval``
``socketTimeout``      a duration (``30s``, ``500ms``, ``2min``, or a number of
                       seconds), default 60s; ``connectTimeout`` the same, default 10s
``deadLetterStream``   a stream key in the sink's slot: rows the mapping refuses (null or
                       out-of-range numbers, keys outside the slot) become entries there
                       in the same transaction (:mod:`twopc.sinks.redis._dead_letter`); default:
                       such a row fails the task naming its entry
``ackGroup``           acknowledge in the sink's commit: the consumer group of the
                       ``twopc-redis-stream`` source the rows came from; the batch's
                       commit call also acknowledges their entries
                       (:mod:`twopc.sinks.redis._acks`); Redis 7, same server (slot).
                       A stream without that group is refused before anything is staged
``ackStreamColumn``    the rows' source stream column (default ``stream``); and
                       ``ackIdColumn`` their entry id column (default ``id``)
=====================  ============================================================

An option not in this table is an error that lists the supported ones; twopc's own
options (``checkpointLocation``, ``sinkId``, ``txnAppId``, ``txnVersion``,
``minBatchesToRetain``) and the ones Spark passes by itself (``path``, ``queryName``) are
accepted. No error message shows the password, wherever it was given.

Server requirements (checked by :meth:`RedisSink.validate`): AOF with fsync always (or
``durability=everysec``), and a ``maxmemory-policy`` that never evicts the markers:
``allkeys-*`` policies are refused (``noeviction`` recommended; ``volatile-*`` is accepted
because markers and staging never have a TTL). On Redis 7.2+ ``WAITAOF 1 0 <ms>`` after
each step would be an alternative way to know a write reached the local AOF with
``appendfsync everysec``; this sink does not require it.

Cluster: all keys of one commit must hash to one slot. Put the sink's hash tag in every
key template (``"{{shop}}:orders"`` with ``hashTag=shop``); with ``requireSameSlot`` on,
a key outside the slot is a :class:`~twopc.ConfigurationError` before anything is staged.
Slots are computed with CRC16 (:func:`key_slot`). The commit script reaches target keys
that it does not declare (they are in the declared keys' slot). Cluster connections use
``redis.cluster.RedisCluster``, which follows MOVED and ASK; tested on a live cluster
(``tests/sinks/redis/test_redis_cluster.py``: slot migration and failover between prepare and commit).

How long one commit blocks the server: the commit is one script, linear in the staged
elements (Redis serves nobody else meanwhile). Measured on a 2-core machine with
``python -m twopc.recovery.demos.bench_redis`` (server-side FCALL time): ~15 ms per 10k HSET fields in
one hash, ~125 ms per 10k rows of HSET (2 fields) + XADD + two counters, 0.05 ms for an
already-committed replay. A transaction is one Spark partition of one batch: bound the
block by the rows per partition (``maxFilesPerTrigger``/``maxOffsetsPerTrigger``,
``repartition``); ``pre_commit``'s checks block for a fraction of that.

Modules: ``_mapping`` (ops, :func:`parse_mapping`, :func:`mapping_json`, compiling),
``_templates`` (templates, cell encoding), ``_keys`` (key names, hash tags, slots),
``_fold`` (the open transaction and its staging list), ``_lua`` (the server-side
library), ``_clients`` (per-process clients, :func:`dispose_clients`), ``_server``
(configuration checks, loading the library, running a step), ``_sink`` (the sink).
"""

from twopc.spi import require as _require

_require("redis", "redis", "the Redis sink (twopc-redis)")

from .._sources import RedisDataSource  # noqa: E402 - after the driver check
from ._clients import dispose_clients  # noqa: E402 - after the driver check
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

__all__ = [
    "HIncrByOp",
    "HSetOp",
    "IncrByOp",
    "RPushOp",
    "RedisDataSource",
    "RedisHandle",
    "RedisKeys",
    "RedisOp",
    "RedisSink",
    "RedisTargetError",
    "SetOp",
    "XAddOp",
    "ZAddOp",
    "dispose_clients",
    "key_slot",
    "mapping_json",
    "parse_mapping",
]
