"""The source's offsets: pure functions, no server.

Entry ids (``<ms>-<seq>``) and ranges of them live in :mod:`twopc.sinks._redis.ids`.
The source's offset (what Spark writes to ``<checkpoint>/offsets/<batch>``) is::

    {"v": 1, "streams": {"<key>": {"id": "<last id included>", "n": <entries read so far>,
                                   "a": <the stream's entry count at id>}, ...}}

A micro-batch reads, for every stream, the entries with ``start[key] < id <= end[key]``
(``XRANGE key (start end``), ``end.n - start.n`` of them: a replay that finds another
number knows entries were deleted (or the stream recreated) and says so. A stream
missing from *start* starts at ``0-0`` (a pattern found it after the query began). ``0-0`` is never an entry's id, so it
means "before every entry". An end whose id is *before* its start's (and whose count is
higher) follows a stream that was deleted and recreated with smaller ids while
``failOnDataLoss=false``: its range starts over at ``0-0``.

``a`` (optional; offsets written before it existed have none) is how many entries the
stream had received up to ``id``, counting as received there also every entry that was
removed before the query began to follow the stream: compared with the stream's
``entries-added`` and ``length`` it tells how many entries after ``id`` were removed
before the query read them (see :mod:`._reader`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from twopc import ConfigurationError

from .._redis.ids import ZERO, EntryId, Range

__all__ = ["START", "Offset", "Position"]


@dataclass(frozen=True, order=True)
class Position:
    """Where a stream stands in an offset: the last entry id included, how many entries the
    query has read from the stream up to it (so a replay can tell that entries of a
    recorded range were deleted), and, when known, the stream's entry count at the id
    (``a`` in the module docstring; bookkeeping, not part of the position's identity)."""

    id: EntryId
    count: int = 0
    added: int | None = field(default=None, compare=False)


START = Position(ZERO, 0)


@dataclass(frozen=True)
class Offset:
    """A :class:`Position` per stream (see the module docstring)."""

    #: each stream's position; a stream not in it is at :data:`START` (``0-0``, 0 entries)
    streams: Mapping[str, Position]

    VERSION = 1

    def to_json(self) -> dict[str, Any]:
        """The dict Spark stores in its offset log."""
        return {"v": self.VERSION, "streams": {k: {"id": str(p.id), "n": p.count,
                                                   **({} if p.added is None else {"a": p.added})}
                                               for k, p in sorted(self.streams.items())}}

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | str | None) -> Offset:
        """Read an offset Spark handed back (a dict, or its JSON text).

        Raises:
            ConfigurationError: not an offset of this source (the checkpoint belongs to
                another source, or a newer twopc wrote it).
        """
        data = json.loads(value) if isinstance(value, str) else (value or {})
        try:
            if data.get("v") != cls.VERSION:
                raise TypeError
            streams = {str(k): Position(EntryId.parse(v["id"], f"offset of stream {k!r}"), int(v["n"]),
                                        None if v.get("a") is None else int(v["a"]))
                       for k, v in data["streams"].items()}
        except (AttributeError, KeyError, TypeError, ValueError):
            raise ConfigurationError(
                f"the checkpoint's offset {str(value)[:120]!r} is not a twopc-redis-stream offset (version "
                f"{cls.VERSION}): the checkpoint belongs to another source or a newer twopc; use a new "
                f"checkpointLocation") from None
        return cls(streams)

    def ranges(self, end: Offset) -> list[Range]:
        """The non-empty ranges from this offset (exclusive) to *end* (inclusive), by stream.

        An end whose id is before the start's but whose count is higher starts over at
        ``0-0`` (the stream was recreated with smaller ids, see the module docstring).

        Raises:
            ConfigurationError: *end* is behind this offset for a stream (not this query's offsets).
        """
        out = []
        for k, hi in sorted(end.streams.items()):
            lo = self.streams.get(k, START)
            if hi.count < lo.count or (hi.id < lo.id and hi.count == lo.count):
                raise ConfigurationError(f"offset of stream {k!r} goes backwards ({lo} to {hi}): the "
                                         f"checkpoint's offsets are not this query's")
            r = Range(k, ZERO if hi.id < lo.id else lo.id, hi.id, hi.count - lo.count)
            if not r.empty:
                out.append(r)
        return out
