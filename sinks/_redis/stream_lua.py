"""The Redis Stream source's FUNCTION library ``twopc_stream_v2`` (``ackGroup`` embeds its ``ack``).

- ``plan``: walk the entries ``lo < id <= hi`` (at most *max*; 0 = all) and return only the
  last id, how many, and every *split*-th id (partition bounds).
- ``ack``, atomically: create the group when missing, move its ``last-delivered-id`` forward
  (never back), set ``entries-read`` (exact lag when at most 1000 entries follow), ``XACK``
  every pending entry ``<= id``, optionally ``XTRIM MINID``.

The code never changes under its name (``tests/sinks/redis/test_redis_stream_offsets.py``
pins its digest); a server may still hold the unused ``twopc_stream_v1``.
"""

from __future__ import annotations

from .library import build_library

__all__ = ["LIBRARY_NAME", "PRELUDE", "function_name", "library_code"]

LIBRARY_NAME = "twopc_stream_v2"

PRELUDE = r"""
-- compare two entry ids '<ms>-<seq>' exactly (64-bit parts do not fit a Lua number)
local function num_cmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  if a == b then return 0 end
  return a < b and -1 or 1
end
local function id_cmp(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  local c = num_cmp(am, bm)
  if c ~= 0 then return c end
  return num_cmp(as, bs)
end
local function field(flat, name)
  for i = 1, #flat, 2 do if flat[i] == name then return flat[i + 1] end end
  return nil
end
-- entries-added minus the entries after id (so XINFO GROUPS shows an exact lag), or nil
-- when more than 1000 entries follow: counting them all made every acknowledgement as slow
-- as the backlog is long (80 ms at 90000 entries behind, Redis blocked meanwhile); XINFO
-- GROUPS then shows the lag as unknown (nil) until an acknowledgement lands within 1000
-- entries of the end
local function entries_read(key, id)
  local after = #redis.call('XRANGE', key, '(' .. id, '+', 'COUNT', 1001)
  if after > 1000 then return nil end
  return field(redis.call('XINFO', 'STREAM', key), 'entries-added') - after
end
"""

FUNCTIONS: dict[str, str] = {
    # keys: stream   args: lo (exclusive), hi (inclusive id or '+'), max (0 = no limit), split (0 = none)
    "plan": r"""
  local hi, max, split = args[2], tonumber(args[3]), tonumber(args[4])
  local cursor, n, last, bounds = '(' .. args[1], 0, '', {}
  while true do
    local want = 1000
    if max > 0 and max - n < want then want = max - n end
    if want <= 0 then break end
    local got = redis.call('XRANGE', keys[1], cursor, hi, 'COUNT', want)
    for i = 1, #got do
      n = n + 1
      last = got[i][1]
      if split > 0 and n % split == 0 then bounds[#bounds + 1] = last end
    end
    if #got < want then break end
    cursor = '(' .. last
  end
  return {last, tostring(n), bounds}
""",
    # keys: stream   args: group, id, minid for XTRIM ('' = no trim)
    "ack": r"""
  if redis.call('EXISTS', keys[1]) == 0 then return {'NOSTREAM'} end
  local last = nil
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', keys[1])) do
    if field(g, 'name') == args[1] then last = field(g, 'last-delivered-id') end
  end
  local created = '0'
  if last == nil or id_cmp(args[2], last) > 0 then
    local n = entries_read(keys[1], args[2])
    local cmd = {'XGROUP', 'SETID', keys[1], args[1], args[2]}
    if last == nil then
      cmd[2] = 'CREATE'
      created = '1'
    end
    if n then
      cmd[#cmd + 1] = 'ENTRIESREAD'
      cmd[#cmd + 1] = tostring(n)
    end
    redis.call(unpack(cmd))
  end
  local acked = 0
  while true do
    local p = redis.call('XPENDING', keys[1], args[1], '-', args[2], 1000)
    if #p == 0 then break end
    local ids = {}
    for i = 1, #p do ids[i] = p[i][1] end
    acked = acked + redis.call('XACK', keys[1], args[1], unpack(ids))
  end
  local trimmed = 0
  if args[3] ~= '' then trimmed = redis.call('XTRIM', keys[1], 'MINID', args[3]) end
  return {'OK', tostring(acked), tostring(trimmed), created}
""",
}


def function_name(name: str) -> str:
    """The FUNCTION name of step *name* (``ack`` -> ``twopc_stream_v2_ack``)."""
    return f"{LIBRARY_NAME}_{name}"


def library_code() -> str:
    """The FUNCTION library source (``FUNCTION LOAD REPLACE`` it)."""
    return build_library(LIBRARY_NAME, PRELUDE, FUNCTIONS)
