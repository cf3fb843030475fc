"""Option ``ackGroup``, server side: ``twopc_redis_ack_v1_commit_batch_ack`` runs
``commit_batch``'s checks and writes, then, in the same atomic call, ``twopc_stream_v2_ack``'s
step (without trimming) up to the highest entry id per stream. This closes the first danger
window (sink committed, entries not acknowledged) instead of recovering it.

Assembled from the two libraries' own text; it never changes under its name
(``tests/sinks/redis/test_redis_ack.py`` pins its digest). Keys: ``txns, prepared, markers,
staging_1..n, stream_1..m``; arguments: ``batch_id, txn_1..n, group, id_1..m, m``; reply as
``commit_batch`` (``FAILED``: nothing applied nor acknowledged).
"""

from __future__ import annotations

from .._redis import stream_lua
from .._redis.library import build_library
from . import _lua as lua

__all__ = ["ACK_LIBRARY_NAME", "ack_function_name", "ack_library_code"]

#: Versioned library name (same rule as :data:`twopc.sinks.redis._lua.LIBRARY_NAME`).
ACK_LIBRARY_NAME = "twopc_redis_ack_v1"

_DONE = "  table.insert(status, 1, 'DONE')\n  return status\n"

_POP_ACKS = r"""
  local m = tonumber(table.remove(args))
  local ack_ids, ack_streams = {}, {}
  for j = m, 1, -1 do
    ack_ids[j] = table.remove(args)
    ack_streams[j] = table.remove(keys)
  end
  local group = table.remove(args)
"""

_ACK = r"""
  for j = 1, m do
    ack_upto({ack_streams[j]}, {group, ack_ids[j], ''})
  end
"""


def ack_library_code() -> str:
    """The library source (``FUNCTION LOAD REPLACE`` it beside the sink's others)."""
    batch = lua.BATCH_FUNCTIONS["commit_batch"]
    assert batch.endswith(_DONE), "commit_batch's reply changed: rebuild this library under a new name"
    prelude = (lua.PRELUDE + "\nlocal ack_upto\ndo\n" + stream_lua.PRELUDE
               + "ack_upto = function(keys, args)\n" + stream_lua.FUNCTIONS["ack"] + "end\nend\n")
    return build_library(ACK_LIBRARY_NAME, prelude,
                         {"commit_batch_ack": _POP_ACKS + batch[: -len(_DONE)] + _ACK + _DONE})


def ack_function_name() -> str:
    """``twopc_redis_ack_v1_commit_batch_ack``."""
    return f"{ACK_LIBRARY_NAME}_commit_batch_ack"
