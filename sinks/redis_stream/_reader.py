"""The streaming reader: offsets, partitions, reads, and the acknowledgement after commit.

The guarantees, in Spark's order of calls:

- ``latestOffset(start, limit)`` (driver) fixes the next micro-batch's range: for every
  stream the last entry id and the running count of entries, at most ``limit`` entries
  in all. Spark writes it to ``<checkpoint>/offsets/<batch>`` before the batch runs. It is
  called only once the batch ending at *start* is committed (sink, then Spark's commit
  log), so it first finishes that batch's acknowledgement if a crash interrupted it.
- ``partitions(start, end)`` splits each stream's recorded range into pieces of at most
  ``maxEntriesPerPartition`` entries, and ``read`` (executors) reads a piece with
  ``XRANGE``: the same entries whatever Redis delivered to whom in between. A range that
  no longer holds the recorded number of entries fails with :class:`~twopc.SourceError`.
- ``commit(end)`` runs after the sink committed the batch and Spark wrote its commit log:
  only then does the consumer group move (``twopc_stream_v2_ack``: ``last-delivered-id``
  forward, ``XACK`` of pending entries up to *end*, optionally ``XTRIM MINID``).

Fault points ``stream_before_ack`` and ``stream_after_ack`` mark the edges of ``commit``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

import faultinject
from twopc import SourceError

from ._ids import ZERO, EntryId, Offset, Position, Range
from ._options import StreamOptions
from ._rows import converters, to_batch, to_row
from ._server import StreamServer

__all__ = ["FAULT_POINTS", "RedisStreamReader", "StreamPartition"]

log = logging.getLogger("twopc.sinks.redis_stream")

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
    """The reader of ``format("twopc-redis-stream")`` (see the module docstring)."""

    def __init__(self, options: StreamOptions, schema: Any) -> None:
        self.o = options
        self.typed = converters(schema)
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")  # what Spark's Python worker expects
        self.server = StreamServer(options.client)
        self._caps: dict[str, EntryId] | None = None
        self._acked: dict[str, EntryId] = {}

    # -- offsets ---------------------------------------------------------------------------------
    def _streams(self, known: Offset | None = None) -> list[str]:
        if self.o.pattern is None:
            return list(self.o.streams)
        found = set(self.server.discover(self.o.pattern))
        return sorted(found | set(known.streams if known else ()))

    def _starting_id(self, stream: str) -> EntryId:
        s = self.o.starting
        if isinstance(s, EntryId):
            return s
        if s == "earliest":
            return ZERO
        if s == "latest":
            return self.server.last_id(stream) or ZERO
        return self.server.group_position(stream, self.o.group) or ZERO

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        """Where a new query starts (``startingPosition``); creates the group (and an empty
        stream) where missing, at that position."""
        positions = {}
        for k in self._streams():
            at = self._starting_id(k)
            self.server.ensure_group(k, self.o.group, at)
            positions[k] = Position(at, 0)
        return Offset(positions).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - PySpark's name
        """``maxEntriesPerTrigger`` as Spark's ``ReadMaxRows``."""
        return ReadMaxRows(self.o.max_per_trigger) if self.o.max_per_trigger else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - PySpark's name
        """``trigger(availableNow=True)``: read up to the streams' last ids as of now."""
        self._caps = {k: self.server.last_id(k) or ZERO for k in self._streams()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        """The end of the next micro-batch (see the module docstring).

        Raises:
            SourceError: a stream read so far was deleted or recreated (``failOnDataLoss``).
            SinkError / SinkUnavailableError: Redis failed.
        """
        begin = Offset.from_json(start)
        self._acknowledge(begin)
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        streams = self._streams(begin)
        for k in streams:
            self._check_alive(k, begin.get(k))
        new: dict[str, Position] = {}
        # with a budget: a fair share per stream first, then what is left to whoever has more
        shares = [None] if budget is None else [max(1, budget // max(1, len(streams))), None]
        for share in shares:
            for k in streams:
                if budget is not None and budget <= 0:
                    break
                at = new.get(k) or begin.get(k)
                cap = None if self._caps is None else self._caps.get(k, ZERO)
                if cap is not None and cap <= at.id:
                    continue
                want = 0 if budget is None else min(share or budget, budget)
                p = self.server.plan(k, at.id, cap, limit=want)
                if p.last is not None:
                    new[k] = Position(p.last, at.count + p.count)
                    budget = None if budget is None else budget - p.count
        streams_out = dict(begin.streams)
        streams_out.update(new)
        return Offset(streams_out).to_json()

    def _check_alive(self, stream: str, at: Position) -> None:
        if at.id == ZERO:
            return
        last = self.server.last_id(stream)
        problem = ("was deleted" if last is None else
                   f"was recreated (its last id {last} is before the query's position {at.id})" if last < at.id else "")
        if not problem:
            return
        message = (f"stream {stream!r} on {self.server.where()} {problem}; the query has read it up to {at.id}. "
                   f"To go on from what is there now set failOnDataLoss=false; to start over use a new "
                   f"checkpointLocation")
        if self.o.fail_on_data_loss:
            raise SourceError(message)
        log.warning("twopc-redis-stream: %s", message)

    # -- planning and reading -------------------------------------------------------------------
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[StreamPartition]:
        """The recorded ranges, split into pieces of at most ``maxEntriesPerPartition``.

        Raises:
            SourceError: a range no longer holds its recorded entries (``failOnDataLoss``).
        """
        out = []
        size = self.o.max_per_partition
        for r in Offset.from_json(start).ranges(Offset.from_json(end)):
            plan = self.server.plan(r.stream, r.lo, r.hi, split=size)
            if plan.count != r.count:
                self._lost(r, plan.count)
            lo, left = r.lo, plan.count
            for b in plan.bounds:
                out.append(StreamPartition(Range(r.stream, lo, b, size), self.o, self.typed))
                lo, left = b, left - size
            if left > 0:
                out.append(StreamPartition(Range(r.stream, lo, r.hi, left), self.o, self.typed))
        return out

    def _lost(self, r: Range, found: int) -> None:
        message = StreamServer(self.o.client).why_changed(r, found)
        if self.o.fail_on_data_loss:
            raise SourceError(message)
        log.warning("twopc-redis-stream (failOnDataLoss=false): %s", message)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of one piece, in id order, as Arrow batches of at most :data:`BATCH_ROWS`.

        Raises:
            SourceError: the piece holds another number of entries than planned
                (``failOnDataLoss``), or a field does not parse (``fieldsSchema``).
        """
        assert isinstance(partition, StreamPartition)
        r, server = partition.range, StreamServer(partition.options.client)
        n = 0
        rows: list[tuple[Any, ...]] = []
        for eid, fields in server.read(r):
            n += 1
            rows.append(to_row(r.stream, eid, fields, partition.typed))
            if len(rows) == BATCH_ROWS:
                yield to_batch(rows, self.arrow_schema)
                rows = []
        if rows:
            yield to_batch(rows, self.arrow_schema)
        if n != r.count:
            message = server.why_changed(r, n)
            if partition.options.fail_on_data_loss:
                raise SourceError(message)
            log.warning("twopc-redis-stream (failOnDataLoss=false): %s", message)

    # -- acknowledgement --------------------------------------------------------------------------
    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed every batch up to *end*: acknowledge it to the group.

        Raises:
            SourceError: a stream was deleted meanwhile.
            SinkError / SinkUnavailableError: Redis failed (the next commit, or the next
                ``latestOffset`` after a restart, acknowledges again).
        """
        faultinject.fault_point("stream_before_ack")
        self._acknowledge(Offset.from_json(end))
        faultinject.fault_point("stream_after_ack")

    def _acknowledge(self, upto: Offset) -> None:
        for k, p in sorted(upto.streams.items()):
            if p.id == ZERO or self._acked.get(k, ZERO) >= p.id:
                continue
            acked, trimmed, created = self.server.ack(k, self.o.group, p.id, trim=self.o.trim_after_commit)
            self._acked[k] = p.id
            if created:
                log.warning("twopc-redis-stream: group %r of stream %r was missing; created at %s", self.o.group, k,
                            p.id)
            log.info("twopc-redis-stream: %s acknowledged up to %s (%d pending entries XACKed, %d trimmed)", k, p.id,
                     acked, trimmed)

    def stop(self) -> None:
        """Nothing to release: connections are pooled per process."""

