"""The Redis Stream source's conversations with Redis (``ackGroup`` reads groups through them
too). Every Redis error becomes a SinkError (SinkUnavailableError: unreachable)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis.exceptions as rex

from twopc import SinkError

from . import stream_lua as lua
from .clients import ClientConfig, Pooled
from .ids import EntryId, Range

__all__ = ["Plan", "StreamInfo", "StreamServer"]

#: Entries per XRANGE call when an executor reads a range.
READ_CHUNK = 1000

#: Most entries one ``plan`` call of :meth:`StreamServer.count` walks (it blocks Redis meanwhile).
COUNT_CHUNK = 100_000


@dataclass(frozen=True)
class Plan:
    """What ``plan`` found: the last id (None when empty), how many, every *split*-th id."""

    last: EntryId | None
    count: int
    bounds: tuple[EntryId, ...]


@dataclass(frozen=True)
class StreamInfo:
    """What ``XINFO STREAM`` says about a stream, as the source uses it."""

    length: int
    added: int  # entries-added: every entry the stream ever received
    last: EntryId  # last-generated-id
    first: EntryId | None  # the first entry's id; None when the stream is empty
    deleted_upto: EntryId  # max-deleted-entry-id: the greatest id removed (0-0: none)

    @classmethod
    def of(cls, reply: dict[str, Any]) -> StreamInfo:
        """Read redis-py's ``xinfo_stream`` reply (Redis 7: ``entries-added``, ``max-deleted-entry-id``)."""
        first = reply.get("first-entry")
        return cls(int(reply["length"]), int(reply.get("entries-added") or 0),
                   EntryId.parse(reply["last-generated-id"]), EntryId.parse(first[0]) if first else None,
                   EntryId.parse(reply.get("max-deleted-entry-id") or "0-0"))


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class StreamServer:
    """One Redis server seen by the source (a per-process pooled client)."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config

    def client(self) -> Any:
        return self.config.pooled().client

    def _load(self, *, force: bool = False) -> None:
        def load(pooled: Pooled) -> None:
            try:
                pooled.on_every_primary(lambda node: node.function_load(lua.library_code(), replace=True))
            except rex.ResponseError as exc:
                if "unknown command" in str(exc).lower():
                    raise SinkError(f"Redis at {self.config.where()} has no FUNCTION command: twopc-redis-stream "
                                    f"needs Redis 7.0 or newer") from None
                raise
        self.config.load_once(lua.LIBRARY_NAME, load, f"load the {lua.LIBRARY_NAME} library", force=force)

    def fcall(self, name: str, keys: Sequence[str], args: Sequence[Any], action: str) -> Any:
        """Run step *name* of the library (loading it when the server lost it)."""
        return self.config.with_library(
            self._load, lambda: self.client().fcall(lua.function_name(name), len(keys), *keys, *args), action,
            f"{lua.LIBRARY_NAME} library")

    def plan(self, stream: str, lo: EntryId, hi: EntryId | None, *, limit: int = 0, split: int = 0) -> Plan:
        """The entries ``lo < id <= hi`` (``hi`` None: to the end), at most *limit* (0: all)."""
        reply = self.fcall("plan", [stream], [str(lo), "+" if hi is None else str(hi), limit, split],
                           f"plan a read of stream {stream!r}")
        last = _text(reply[0])
        return Plan(EntryId.parse(last) if last else None, int(reply[1]), tuple(EntryId.parse(b) for b in reply[2]))

    def count(self, stream: str, lo: EntryId, hi: EntryId) -> int:
        """How many entries ``lo < id <= hi`` the stream holds (calls of :data:`COUNT_CHUNK`)."""
        n = 0
        while True:
            p = self.plan(stream, lo, hi, limit=COUNT_CHUNK)
            n += p.count
            if p.last is None or p.count < COUNT_CHUNK:
                return n
            lo = p.last

    def ack(self, stream: str, group: str, upto: EntryId, *, trim: bool) -> tuple[int, int, bool] | None:
        """Acknowledge everything ``<= upto`` for *group* (and trim it with *trim*): (XACKed, trimmed,
        group created), or None when the stream does not exist."""
        reply = self.fcall("ack", [stream], [group, str(upto), str(upto.next()) if trim else ""],
                           f"acknowledge stream {stream!r} up to {upto} for group {group!r}")
        if _text(reply[0]) == "NOSTREAM":
            return None
        return int(reply[1]), int(reply[2]), _text(reply[3]) == "1"

    def discover(self, pattern: str) -> list[str]:
        """The stream keys matching *pattern* (``SCAN ... TYPE stream``), sorted."""
        return self.config.call(f"list the streams matching {pattern!r}", lambda c: sorted(
            {_text(k) for k in c.scan_iter(match=pattern, count=1000, _type="stream")}))

    def info(self, stream: str) -> StreamInfo | None:
        """``XINFO STREAM``, or None when the key does not exist."""
        reply = self.config.call_unless(f"read XINFO STREAM {stream!r}", lambda c: c.xinfo_stream(stream),
                                        "no such key")
        return None if reply is None else StreamInfo.of(reply)

    def groups(self, stream: str) -> list[dict[str, Any]] | None:
        """``XINFO GROUPS`` (one dict per group), or None when the stream does not exist."""
        return self.config.call_unless(f"read the groups of {stream!r}", lambda c: list(c.xinfo_groups(stream)),
                                       "no such key")

    def group_names(self, stream: str) -> list[str] | None:
        """The names of *stream*'s consumer groups, or None when the stream does not exist."""
        groups = self.groups(stream)
        return None if groups is None else [_text(g["name"]) for g in groups]

    def group_position(self, stream: str, group: str) -> EntryId | None:
        """Where *group* stands: its ``last-delivered-id``, or just before its oldest pending
        entry when that is earlier; None when the stream or the group does not exist."""
        for g in self.groups(stream) or ():
            if _text(g["name"]) == group:
                pos = EntryId.parse(g["last-delivered-id"])
                if int(g.get("pending") or 0):
                    oldest = self.config.call(f"read XPENDING of {stream!r}",
                                              lambda c: c.xpending_range(stream, group, "-", "+", 1))
                    if oldest:
                        pos = min(pos, EntryId.parse(oldest[0]["message_id"]).previous())
                return pos
        return None

    def ensure_group(self, stream: str, group: str, at: EntryId, *, create_stream: bool = False) -> None:
        """Create *group* at *at* unless it exists (and with *create_stream* the missing stream)."""
        self.config.call_unless(f"create group {group!r} on {stream!r}",
                                lambda c: c.xgroup_create(stream, group, id=str(at), mkstream=create_stream),
                                "busygroup")

    def read(self, r: Range) -> Iterator[tuple[bytes, dict[bytes, bytes]]]:
        """The entries of *r* in id order, read in chunks of :data:`READ_CHUNK`."""
        cursor = f"({r.lo}"
        while True:
            try:
                got = self.client().xrange(r.stream, cursor, str(r.hi), count=READ_CHUNK)
            except rex.RedisError as exc:
                raise self.config.error(exc, f"read stream {r.stream!r} ({r.lo}, {r.hi}]") from None
            yield from got
            if len(got) < READ_CHUNK:
                return
            cursor = "(" + _text(got[-1][0])

    def why_changed(self, r: Range, found: int) -> str:
        """The message for a range that holds *found* entries instead of the recorded count."""
        head = (f"stream {r.stream!r} on {self.config.where()}: the micro-batch's range ({r.lo}, {r.hi}] held "
                f"{r.count} entries when Spark recorded it, and now holds {found}")
        info = self.info(r.stream)
        if info is None:
            cause = "the stream was deleted"
        elif info.last < r.hi:
            cause = f"the stream was deleted and recreated (its last id is now {info.last}, before the range's end)"
        else:
            cause = "entries were deleted (XDEL, or XTRIM/MAXLEN by a producer) before they were read"
        return (f"{head}: {cause}. Nothing of this micro-batch is committed. To go on without the lost "
                f"entries set failOnDataLoss=false; to start over use a new checkpointLocation")
