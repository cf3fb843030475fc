"""The source's offset, as Spark writes it to ``<checkpoint>/offsets/<batch>``::

    {"v": 1, "streams": {"<key>": {"id": "<last id included>", "n": <entries read so far>,
                                   "a": <the stream's entry count at id>}, ...}}

A micro-batch reads ``start[key] < id <= end[key]``, ``end.n - start.n`` entries: a replay that finds another number
reports deleted entries. A stream missing from *start* starts at ``0-0``; an end id before its start's (with a higher
count) follows a stream recreated with smaller ids (``failOnDataLoss=false``) and starts over at ``0-0``. The optional
``a`` counts as received at ``id`` every entry removed before the query followed the stream, so that ``entries-added``
tells the entries removed unread (:mod:`._reader`).
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
    """A stream's place in an offset: ``id``, ``n`` and ``a`` of the module docstring (``a`` is
    not part of the position's identity)."""

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
        """Read an offset Spark handed back (a dict or its JSON); ConfigurationError for another's."""
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
        """The non-empty ranges from this offset (exclusive) to *end* (inclusive), by stream;
        ConfigurationError when *end* is behind it (not this query's offsets)."""
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
