"""The streaming reader, in Spark's order of calls:

- ``initialOffset()`` refuses a listed stream that does not exist (unless
  ``createStreams=true``) before it creates any group.
- ``latestOffset(start, limit)`` fixes the next range (last id and running count per stream,
  at most ``limit`` entries); called once the batch ending at *start* committed, it first
  finishes that batch's acknowledgement if a crash interrupted it.
- ``partitions``/``read`` read pieces of at most ``maxEntriesPerPartition`` with ``XRANGE``;
  a range that no longer holds its recorded count fails with :class:`~twopc.spi.SourceError`.
- ``commit(end)``, after the sink and Spark's commit log, moves the group
  (``twopc_stream_v2_ack``); fault points ``stream_before_ack``/``stream_after_ack`` around it.

Entries removed unread (``failOnDataLoss``): whenever planning knows how many entries follow
the position, ``entries-added - a - held after`` were removed (XTRIM, MAXLEN, MINID, XDEL);
a count above ``entries-added`` means the stream was recreated.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from twopc import ConfigurationError, faultinject
from twopc.spi import SourceError
from twopc.spi.runtime import note_worker_use

from .._redis.ids import ZERO, EntryId, Range
from .._redis.stream_server import StreamInfo, StreamServer
from ._ids import START, Offset, Position
from ._read_options import StreamOptions
from ._rows import converters, entries_batch

__all__ = ["FAULT_POINTS", "RedisStreamReader", "StreamPartition"]

log = logging.getLogger("twopc.sinks.redis_source")

#: Rows per Arrow batch that ``read`` yields.
BATCH_ROWS = 4096

FAULT_POINTS = {
    "stream_before_ack": "driver: the batch is committed (sink and Spark's commit log), its entries not yet "
                         "acknowledged to the consumer group",
    "stream_after_ack": "driver: the group acknowledged the batch (and trimmed), commit() not yet returned",
}
for _name, _text in FAULT_POINTS.items():
    faultinject.declare(_name, _text)


@dataclass(frozen=True)
class StreamPartition(InputPartition):
    """One piece of a recorded range, read by one task."""

    range: Range
    options: StreamOptions
    typed: tuple[tuple[str, str], ...]

    def __repr__(self) -> str:  # the options hold the password
        r = self.range
        return f"StreamPartition({r.stream!r}, ({r.lo}, {r.hi}], {r.count} entries)"


class RedisStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The reader of ``format("twopc-redis-stream")``."""

    def __init__(self, options: StreamOptions, schema: Any) -> None:
        self.o = options
        self.typed = converters(schema)
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")  # what Spark's Python worker expects
        self.server = StreamServer(options.client)
        self._caps: dict[str, EntryId] | None = None
        self._initial: dict[str, Any] | None = None
        self._acked: dict[str, EntryId] = {}
        self._known: dict[str, tuple[EntryId, int]] = {}  # stream -> (position, entry count there)
        # (stream, lo, hi) -> (entries, partition bounds), as the last latestOffset planned them
        self._planned: dict[tuple[str, EntryId, EntryId], tuple[int, tuple[EntryId, ...]]] = {}
        self._warned: set[str] = set()

    def _streams(self, known: Offset | None = None) -> list[str]:
        if self.o.pattern is None:
            return list(self.o.streams)
        return sorted(set(self.server.discover(self.o.pattern)) | set(known.streams if known else ()))

    def _starting_id(self, stream: str, info: StreamInfo | None) -> EntryId:
        s = self.o.starting
        if isinstance(s, EntryId):
            return s
        if s == "earliest" or info is None:
            return ZERO
        if s == "latest":
            return info.last
        return self.server.group_position(stream, self.o.group) or ZERO

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        """Where a new query starts (``startingPosition``), creating missing groups there; Spark's
        second call gets the first answer. ConfigurationError for a missing stream (nothing created)."""
        if self._initial is None:
            self._initial = self._first_offset()
        return self._initial

    def _first_offset(self) -> dict[str, Any]:
        streams = self._streams()
        infos = {k: self.server.info(k) for k in streams}
        missing = [k for k, info in infos.items() if info is None]
        if missing and not self.o.create_streams:
            names = ", ".join(repr(k) for k in missing)
            raise ConfigurationError(
                f"streams: no stream {names} on {self.server.config.where()}: a misspelled key would read nothing, "
                f"forever. Check the name, or create the stream first (XADD, or XGROUP CREATE <key> "
                f"{self.o.group} $ MKSTREAM); to start before producers create it, set createStreams=true")
        positions = {}
        for k in streams:
            info = infos[k]
            at = self._starting_id(k, info)
            self.server.ensure_group(k, self.o.group, at, create_stream=self.o.create_streams)
            if info is None:
                log.info("twopc-redis-stream: stream %r did not exist; created it empty with group %r "
                         "(createStreams=true)", k, self.o.group)
            elif self.o.starting == "group":  # the count at a position read after the first look
                info = self.server.info(k)
            added = _added_at(at, info)
            if added is None and info is not None:  # the stream holds entries before the start: count the rest
                added = info.added - self.server.count(k, at, info.last)
            positions[k] = Position(at, 0, added)
        return Offset(positions).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - PySpark's name
        """``maxEntriesPerTrigger`` as Spark's ``ReadMaxRows``."""
        return ReadMaxRows(self.o.max_per_trigger) if self.o.max_per_trigger else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - PySpark's name
        """``trigger(availableNow=True)``: read up to the streams' last ids as of now."""
        self._caps = {k: info.last if (info := self.server.info(k)) else ZERO for k in self._streams()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        """The end of the next micro-batch; SourceError (``failOnDataLoss``) for a stream deleted or
        recreated, or entries removed unread."""
        begin = Offset.from_json(start)
        self._acknowledge(begin)
        self._planned = {}
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        steps = [self._step(k, begin.streams.get(k, START)) for k in self._streams(begin)]
        live = [s for s in steps if s.info is not None]
        # with a budget: a fair share per stream first, then what is left to whoever has more
        shares = [None] if budget is None else [max(1, budget // max(1, len(live))), None]
        for share in shares:
            for s in live:
                if budget is not None and budget <= 0:
                    break
                assert s.info is not None
                cap = s.info.last if self._caps is None else min(self._caps.get(s.stream, ZERO), s.info.last)
                at = s.last or s.lo
                if cap <= at:
                    s.complete = cap == s.info.last
                    continue
                want = 0 if budget is None else min(share or budget, budget)
                p = self.server.plan(s.stream, at, cap, limit=want, split=self.o.max_per_partition)
                s.complete = cap == s.info.last and (want == 0 or p.count < want or p.last == cap)
                s.bounds = p.bounds if s.last is None else None  # a second walk's bounds count from its own start
                if p.last is not None:
                    s.last, s.planned = p.last, s.planned + p.count
                    budget = None if budget is None else budget - p.count
        streams_out = dict(begin.streams)
        for s in live:
            if (moved := self._settle(s)) is not None:
                streams_out[s.stream] = moved
                if s.bounds is not None and s.last is not None:
                    self._planned[(s.stream, s.lo, s.last)] = (s.planned, s.bounds)
        return Offset(streams_out).to_json()

    def _step(self, stream: str, at: Position) -> _Step:
        """XINFO STREAM before planning; a stream deleted, or recreated (then read from ``0-0``), is a loss."""
        info = self.server.info(stream)
        known = self._known.get(stream)
        step = _Step(stream, at, info, at.id, known[1] if known is not None and known[0] == at.id else at.added)
        where = f"stream {stream!r} on {self.server.config.where()}"
        if info is None and at.id != ZERO:
            self._changed(f"{where} was deleted; the query has read it up to {at.id}",
                          then="reading it again once it exists")
        elif info is not None and info.last < at.id and at.count > 0:  # not a start position ahead of the stream
            self._changed(f"{where} was deleted and recreated (its last id {info.last} is before the query's "
                          f"position {at.id})", then="reading the new stream from its first entry")
            step.lo, step.added = ZERO, None
        return step

    def _settle(self, s: _Step) -> Position | None:
        """After planning: report entries removed unread, and the new position (None: not moved)."""
        info = s.info
        assert info is not None
        present = (s.planned if s.complete else info.length if info.first is None or info.first > s.lo else None)
        added = s.added
        where = f"stream {s.stream!r} on {self.server.config.where()}"
        if added is not None and (info.added < added or (present is not None and info.added - added - present < 0)):
            self._changed(f"{where} was deleted and recreated: it has received {info.added} entries in all, fewer "
                          f"than the query counted up to its position {s.lo}",
                          then="reading the new stream from that position")
            added = None
        if added is None:
            if present is None:  # once per stream: count what follows the position
                present = s.planned + self.server.count(s.stream, s.last or s.lo, info.last)
            added = info.added - present  # what was removed before now is not counted as lost
        elif present is not None and (lost := info.added - added - present) > 0:
            held = (f"the stream now holds {_entries(info.length)} from {info.first}" if info.first is not None
                    else "the stream is now empty")
            self._changed(
                f"{where}: {_entries(lost)} the query had not read {'was' if lost == 1 else 'were'} trimmed or "
                f"deleted by someone else (XTRIM, XADD MAXLEN/MINID, XDEL); the query has read up to {s.lo}, "
                f"{held} ({info.added} added in all)",
                hint="To keep entries until the query has read them, trim with MINID at most the group's "
                     "last-delivered-id (XINFO GROUPS), or let the query trim (trimAfterCommit=true)",
                then="reading on with what is left")
            added += lost
        self._known[s.stream] = (s.lo, added)
        if s.last is None:
            return None
        return Position(s.last, s.at.count + s.planned, added + s.planned)

    def _changed(self, message: str, *, then: str, hint: str = "") -> None:
        """A loss: SourceError with ``failOnDataLoss=true``, else one WARNING per reader and message."""
        if self.o.fail_on_data_loss:
            raise SourceError(f"{message}. To go on with what is there now set failOnDataLoss=false; to start "
                              f"over use a new checkpointLocation" + (f". {hint}" if hint else ""))
        if message not in self._warned:
            self._warned.add(message)
            log.warning("twopc-redis-stream (failOnDataLoss=false): %s; %s", message, then)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[StreamPartition]:
        """The recorded ranges in pieces of at most ``maxEntriesPerPartition`` (as ``latestOffset``
        planned them, else walked again); SourceError for a range short of entries."""
        out = []
        size = self.o.max_per_partition
        for r in Offset.from_json(start).ranges(Offset.from_json(end)):
            planned = self._planned.pop((r.stream, r.lo, r.hi), None)
            if planned is not None and planned[0] == r.count:
                count, bounds = planned
            else:
                plan = self.server.plan(r.stream, r.lo, r.hi, split=size)
                count, bounds = plan.count, plan.bounds
                if count != r.count:
                    _lost(self.server, r, count, self.o.fail_on_data_loss)
            lo, left = r.lo, count
            for b in bounds:
                out.append(StreamPartition(Range(r.stream, lo, b, size), self.o, self.typed))
                lo, left = b, left - size
            if left > 0:
                out.append(StreamPartition(Range(r.stream, lo, r.hi, left), self.o, self.typed))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of one piece, in id order, as Arrow batches; SourceError for another number of
        entries than planned, or a field that does not parse."""
        assert isinstance(partition, StreamPartition)
        note_worker_use()
        r, server = partition.range, StreamServer(partition.options.client)
        entries, n = server.read(r), 0
        while chunk := list(itertools.islice(entries, BATCH_ROWS)):
            n += len(chunk)
            yield entries_batch(r.stream, chunk, partition.typed, self.arrow_schema)
        if n != r.count:
            _lost(server, r, n, partition.options.fail_on_data_loss)

    def commit(self, end: dict[str, Any]) -> None:
        """Acknowledge every batch up to *end* to the group; SourceError for a stream deleted meanwhile
        (a Redis failure is retried by the next commit or ``latestOffset``)."""
        faultinject.fault_point("stream_before_ack")
        self._acknowledge(Offset.from_json(end))
        faultinject.fault_point("stream_after_ack")

    def _acknowledge(self, upto: Offset) -> None:
        for k, p in sorted(upto.streams.items()):
            if p.id == ZERO or self._acked.get(k) == p.id:
                continue
            done = self.server.ack(k, self.o.group, p.id, trim=self.o.trim_after_commit)
            if done is None:
                self._changed(f"stream {k!r} on {self.server.config.where()} was deleted while the query read it: the "
                              f"entries up to {p.id} are committed but cannot be acknowledged for group "
                              f"{self.o.group!r}", then="acknowledging it once it exists again")
                continue
            acked, trimmed, created = done
            self._acked[k] = p.id
            if created:
                log.warning("twopc-redis-stream: group %r of stream %r was missing; created at %s", self.o.group, k,
                            p.id)
            log.info("twopc-redis-stream: %s acknowledged up to %s (%d pending entries XACKed, %d trimmed)", k, p.id,
                     acked, trimmed)

    def stop(self) -> None:
        """Nothing to release: connections are pooled per process."""


@dataclass
class _Step:
    """One stream while ``latestOffset`` plans it: position *at*, ``XINFO STREAM`` (None: gone),
    where planning starts (*lo*), the entry count at *lo* when known, and what planning found."""

    stream: str
    at: Position
    info: StreamInfo | None
    lo: EntryId
    added: int | None
    last: EntryId | None = None
    planned: int = 0
    complete: bool = False  # planning walked every entry up to the stream's last id
    bounds: tuple[EntryId, ...] | None = None  # partition bounds, when one walk from *lo* planned it


def _lost(server: StreamServer, r: Range, found: int, fail: bool) -> None:
    message = server.why_changed(r, found)
    if fail:
        raise SourceError(message)
    log.warning("twopc-redis-stream (failOnDataLoss=false): %s", message)


def _entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def _added_at(at: EntryId, info: StreamInfo | None) -> int | None:
    """The entry count at start *at* when ``XINFO STREAM`` alone tells it (else None: count)."""
    if info is None:
        return 0
    if at >= info.last:
        return info.added
    if info.first is None or info.first > at:
        return info.added - info.length
    return None
