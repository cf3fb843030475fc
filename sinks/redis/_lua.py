"""Server-side code of the Redis sink: Lua loaded as FUNCTION libraries (Redis 7+, kept across restarts) or, on older
servers, as EVALSHA scripts (re-sent on ``NOSCRIPT``).

A staging is one LIST of MessagePack arrays ``[cmd, [arg...], cmd, [arg...], ...]`` (Redis's ``cmsgpack`` decodes
them), or, as ``twopc_redis_v1`` staged and every library still reads, of groups ``"<CMD> <n>"`` then ``n``
arguments: check groups first, then apply groups (one ``redis.call`` each, at most :data:`MAX_ARGS` arguments: Lua's
``unpack`` fails above ~8000 values). An older version reads the packed format as ``DAMAGED`` and applies nothing.

- ``?T <type> <op> key...``: every key is of Redis type ``<type>`` or missing.
- ``?I <op> key...`` / ``?H <op> key field...``: every key / hash field is missing or holds
  an integer within +-10^18 (plus a delta within +-10^18 cannot overflow 64 bits).

A commit runs every check before its first write, because a Lua error does not roll back writes already done.
Transaction ids are opaque strings to every step.

Code loaded under a name never changes: servers keep a library across restarts, and processes of two versions would
swap each other's code; a change gets a new name (``tests/sinks/redis`` pins the digests). ``commit_batch`` lives in
:data:`BATCH_LIBRARY_NAME` beside :data:`LIBRARY_NAME`; older processes keep using theirs (``twopc_redis_v1``,
``twopc_redis_batch_v1``, ``twopc_redis_ack_v1``).

Option ``ackGroup``: :data:`ACK_LIBRARY_NAME`'s ``commit_batch_ack`` runs ``commit_batch``'s checks and writes, then,
in the same atomic call, ``twopc_stream_v2_ack``'s step (without trimming) up to the highest entry id per stream: the
first danger window (sink committed, entries not acknowledged) is closed instead of recovered. Keys: ``txns, prepared,
markers, staging_1..n, stream_1..m``; arguments: ``batch_id, txn_1..n, group, id_1..m, m``; reply as ``commit_batch``
(``FAILED``: nothing applied nor acknowledged).
"""

from __future__ import annotations

import hashlib

from .._redis import stream_lua
from .._redis.library import build_library

__all__ = ["ACK_LIBRARY_NAME", "BATCH_FUNCTIONS", "BATCH_LIBRARY_NAME", "FUNCTIONS", "LIBRARY_NAME", "MAX_ARGS",
           "MAX_BATCH_TXNS", "PRELUDE", "ack_library_code", "batch_library_code", "function_name", "library_code",
           "script_code", "script_sha"]

#: Most arguments one ``redis.call`` of the commit script receives.
MAX_ARGS = 1000

LIBRARY_NAME = "twopc_redis_v2"

BATCH_LIBRARY_NAME = "twopc_redis_batch_v2"

ACK_LIBRARY_NAME = "twopc_redis_ack_v2"

#: Most transactions one ``commit_batch`` call commits (a larger batch takes several calls).
MAX_BATCH_TXNS = 512

PRELUDE = r"""
local APPLY = {SET=true, HSET=true, INCRBY=true, HINCRBY=true, XADD=true, RPUSH=true, ZADD=true}

-- Iterate the groups of a staging list: (cmd, args) per group. An element is a MessagePack array
-- {cmd, {arg...}, cmd, {arg...}, ...}, or, as versions before twopc_redis_v2 staged, a text header
-- "<CMD> <n>" followed by n argument elements. The list is read in slices (1000 elements of the text
-- format, 8 of the packed one).
local function groups(key)
  local buf, pos, base, step = {}, 1, 0, 1
  local packed, ppos = nil, 1
  local function nxt()
    if pos > #buf then
      buf = redis.call('LRANGE', key, base, base + step - 1)
      base = base + #buf
      pos = 1
      if #buf == 0 then return nil end
    end
    local v = buf[pos]
    pos = pos + 1
    return v
  end
  return function()
    while true do
      if packed ~= nil then
        local cmd, a = packed[ppos], packed[ppos + 1]
        if cmd ~= nil then
          ppos = ppos + 2
          if type(cmd) ~= 'string' or type(a) ~= 'table' then return 'DAMAGED', nil end
          return cmd, a
        end
        packed = nil
      end
      local h = nxt()
      if h == nil then return nil end
      local b = string.byte(h, 1)
      if b ~= nil and ((b >= 0x90 and b <= 0x9f) or b == 0xdc or b == 0xdd) then
        step = 8
        local ok, t = pcall(cmsgpack.unpack, h)
        if not ok or type(t) ~= 'table' then return 'DAMAGED', nil end
        packed, ppos = t, 1
      else
        step = 1000
        local cmd, n = string.match(h, '^(%S+) (%d+)$')
        if cmd == nil then return 'DAMAGED', nil end
        local a = {}
        for i = 1, tonumber(n) do
          local v = nxt()
          if v == nil then return 'DAMAGED', nil end
          a[i] = v
        end
        return cmd, a
      end
    end
  end
end

-- nil/false (missing), or an integer Redis parses, within +-10^18.
local function small_int(v)
  if not v then return true end
  local s = v
  if string.sub(s, 1, 1) == '-' then
    s = string.sub(s, 2)
    if s == '0' then return false end
  end
  if s == '0' then return true end
  return #s <= 18 and string.match(s, '^[1-9]%d*$') ~= nil
end

-- Run every check group; return nil when all pass, else an error reply table.
local function check(skey)
  local nextgroup = groups(skey)
  while true do
    local cmd, a = nextgroup()
    if cmd == nil then return nil end
    if cmd == 'DAMAGED' then return {'DAMAGED', 'malformed group', ''} end
    if string.sub(cmd, 1, 1) ~= '?' then
      if not APPLY[cmd] then return {'DAMAGED', 'unknown command ' .. cmd, ''} end
      return nil
    end
    if cmd == '?T' then
      local want, op = a[1], a[2]
      for i = 3, #a do
        local t = redis.call('TYPE', a[i])['ok']
        if t ~= 'none' and t ~= want then return {'WRONGTYPE', a[i], t, op, want} end
      end
    elseif cmd == '?I' then
      for i = 2, #a do
        if not small_int(redis.call('GET', a[i])) then return {'NOTINT', a[i], '', a[1]} end
      end
    elseif cmd == '?H' then
      for i = 2, #a, 2 do
        if not small_int(redis.call('HGET', a[i], a[i + 1])) then return {'NOTINT', a[i], a[i + 1], a[1]} end
      end
    else
      return {'DAMAGED', 'unknown check ' .. cmd, ''}
    end
  end
end

-- Apply every apply group (checks are skipped); returns the number of calls made.
local function apply(skey)
  local nextgroup = groups(skey)
  local n = 0
  while true do
    local cmd, a = nextgroup()
    if cmd == nil then return n end
    if string.sub(cmd, 1, 1) ~= '?' then
      if not APPLY[cmd] then return error('twopc: staging damaged, unknown command ' .. cmd) end
      redis.call(cmd, unpack(a))
      n = n + 1
    end
  end
end
"""

# Each body sees ``keys`` and ``args`` (FUNCTION callback arguments, or KEYS/ARGV).
FUNCTIONS: dict[str, str] = {
    # keys: txns, staging   args: txn_id, element...
    "stage": r"""
  if not redis.call('ZSCORE', keys[1], args[1]) then return {'ABORTED'} end
  redis.call('RPUSH', keys[2], unpack(args, 2))
  return {'OK'}
""",
    # keys: txns, prepared, staging   args: txn_id, element count
    "prepare": r"""
  if not redis.call('ZSCORE', keys[1], args[1]) then return {'ABORTED'} end
  local have = redis.call('LLEN', keys[3])
  if have ~= tonumber(args[2]) then return {'DAMAGED', 'staging has ' .. have .. ' elements', args[2]} end
  local err = check(keys[3])
  if err then return err end
  redis.call('HSET', keys[2], args[1], args[2])
  return {'PREPARED'}
""",
    # keys: txns, prepared, staging, markers   args: txn_id, batch_id
    "commit": r"""
  if redis.call('ZSCORE', keys[4], args[1]) then return {'ALREADY'} end
  local n = redis.call('HGET', keys[2], args[1])
  if not n then
    if redis.call('ZSCORE', keys[1], args[1]) then return {'UNPREPARED'} end
    return {'LOST'}
  end
  local have = redis.call('LLEN', keys[3])
  if have ~= tonumber(n) then return {'DAMAGED', 'staging has ' .. have .. ' elements', n} end
  local err = check(keys[3])
  if err then return err end
  local calls = apply(keys[3])
  redis.call('ZADD', keys[4], args[2], args[1])
  redis.call('UNLINK', keys[3])
  redis.call('HDEL', keys[2], args[1])
  redis.call('ZREM', keys[1], args[1])
  return {'COMMITTED', tostring(calls)}
""",
    # keys: txns, prepared, staging, markers   args: txn_id
    "abort": r"""
  if redis.call('ZSCORE', keys[4], args[1]) then return {'COMMITTED'} end
  local gone = redis.call('UNLINK', keys[3]) + redis.call('HDEL', keys[2], args[1])
    + redis.call('ZREM', keys[1], args[1])
  return {'ABORTED', tostring(gone)}
""",
}

BATCH_FUNCTIONS: dict[str, str] = {
    # keys: txns, prepared, markers, staging_1..staging_n   args: batch_id, txn_1..txn_n
    # Reply: {'DONE', status_1..status_n} (COMMITTED, ALREADY or LOST), or
    # {'FAILED', txn_i, <the v1 commit's error reply>...} with nothing applied.
    "commit_batch": r"""
  local n = #args - 1
  if #keys ~= n + 3 then return {'FAILED', '', 'DAMAGED', 'keys and transactions differ', ''} end
  local status = {}
  for i = 1, n do
    local txn, skey = args[i + 1], keys[i + 3]
    if redis.call('ZSCORE', keys[3], txn) then
      status[i] = 'ALREADY'
    else
      local want = redis.call('HGET', keys[2], txn)
      if not want then
        if redis.call('ZSCORE', keys[1], txn) then return {'FAILED', txn, 'UNPREPARED'} end
        status[i] = 'LOST'
      else
        local have = redis.call('LLEN', skey)
        if have ~= tonumber(want) then
          return {'FAILED', txn, 'DAMAGED', 'staging has ' .. have .. ' elements', want}
        end
        local err = check(skey)
        if err then
          table.insert(err, 1, txn)
          table.insert(err, 1, 'FAILED')
          return err
        end
        status[i] = 'COMMITTED'
      end
    end
  end
  for i = 1, n do
    if status[i] == 'COMMITTED' then
      local txn, skey = args[i + 1], keys[i + 3]
      apply(skey)
      redis.call('ZADD', keys[3], args[1], txn)
      redis.call('UNLINK', skey)
      redis.call('HDEL', keys[2], txn)
      redis.call('ZREM', keys[1], txn)
    end
  end
  table.insert(status, 1, 'DONE')
  return status
""",
}


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


def function_name(name: str) -> str:
    """The FUNCTION name of server-side step *name* (``commit`` -> ``twopc_redis_v2_commit``)."""
    library = BATCH_LIBRARY_NAME if name in BATCH_FUNCTIONS else LIBRARY_NAME
    return f"{ACK_LIBRARY_NAME if name == 'commit_batch_ack' else library}_{name}"


def library_code() -> str:
    """The FUNCTION library source (``FUNCTION LOAD REPLACE`` it)."""
    return build_library(LIBRARY_NAME, PRELUDE, FUNCTIONS)


def batch_library_code() -> str:
    """The batch-commit FUNCTION library source."""
    return build_library(BATCH_LIBRARY_NAME, PRELUDE, BATCH_FUNCTIONS)


def ack_library_code() -> str:
    """The ``ackGroup`` library source, assembled from the two libraries' own text."""
    batch = BATCH_FUNCTIONS["commit_batch"]
    assert batch.endswith(_DONE), "commit_batch's reply changed: rebuild this library under a new name"
    prelude = (PRELUDE + "\nlocal ack_upto\ndo\n" + stream_lua.PRELUDE
               + "ack_upto = function(keys, args)\n" + stream_lua.FUNCTIONS["ack"] + "end\nend\n")
    return build_library(ACK_LIBRARY_NAME, prelude,
                         {"commit_batch_ack": _POP_ACKS + batch[: -len(_DONE)] + _ACK + _DONE})


def script_code(name: str) -> str:
    """The EVAL script of step *name*, for servers without FUNCTION (Redis < 7)."""
    return PRELUDE + "\nlocal keys, args = KEYS, ARGV\n" + {**FUNCTIONS, **BATCH_FUNCTIONS}[name]


def script_sha(name: str) -> str:
    """SHA1 of :func:`script_code` (what ``EVALSHA`` needs)."""
    return hashlib.sha1(script_code(name).encode("utf-8")).hexdigest()
