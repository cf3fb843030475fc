"""Acknowledging in the sink's commit (``ackGroup``): which source entries a transaction's rows came from.

With option ``ackGroup``, every row carries the Redis Stream key and entry id it was read
from (``twopc-redis-stream``'s ``stream`` and ``id`` columns, or the columns named by
``ackStreamColumn``/``ackIdColumn``). Each task attempt keeps the highest id per stream;
its handle carries them, and the batch's last commit call acknowledges every stream up to
the batch's highest id in the same atomic call that applies the writes
(:mod:`twopc.sinks.redis._ack_lua`). Acknowledging up to the highest id is safe there: every
entry at or below it was either written by this batch (committed by this call or an earlier
call of the same decided batch) or by an earlier, committed batch, or filtered out by the
query. Before a transaction stages anything, :meth:`AckSpec.check_groups` makes sure the
group exists on every stream: the commit's acknowledgement would create a misspelled one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from twopc import ConfigurationError
from twopc.spi import SchemaMismatchError

from .._handles import RedisHandle
from .._redis.ids import ZERO, EntryId
from .._redis.stream_server import StreamServer

__all__ = ["AckSpec", "batch_acks"]


@dataclass(frozen=True)
class AckSpec:
    """Option ``ackGroup`` and the columns that name each row's source entry."""

    group: str
    stream_column: str = "stream"
    id_column: str = "id"

    @classmethod
    def from_options(cls, group: str | None, stream_column: str | None, id_column: str | None) -> AckSpec | None:
        """Options ``ackGroup``, ``ackStreamColumn``, ``ackIdColumn``; None without ``ackGroup``.

        Raises:
            ConfigurationError: a column option without ``ackGroup``.
        """
        if not group:
            if stream_column or id_column:
                raise ConfigurationError("ackStreamColumn and ackIdColumn name the source columns of option "
                                         "ackGroup: set ackGroup (the consumer group twopc-redis-stream reads "
                                         "with) or drop them")
            return None
        return cls(group, stream_column or "stream", id_column or "id")

    def check_schema(self, schema: pa.Schema) -> None:
        """Both columns exist and are strings.

        Raises:
            SchemaMismatchError: one is missing or not a string (the message names the option).
        """
        for option, col in (("ackStreamColumn", self.stream_column), ("ackIdColumn", self.id_column)):
            i = schema.get_field_index(col)
            if i < 0 or (not pa.types.is_string(schema.field(i).type) and not pa.types.is_large_string(
                    schema.field(i).type)):
                raise SchemaMismatchError(
                    f"ackGroup {self.group!r} acknowledges each row's source entry, read from string column "
                    f"{col!r} ({option}); the DataFrame has {schema.names}: keep twopc-redis-stream's stream "
                    f"and id columns in the rows, or name them with {option}")

    def check_groups(self, server: StreamServer, streams: Iterable[str]) -> None:
        """The group exists on every stream the rows came from (a stream that no longer
        exists is left to the source, which reports it).

        Raises:
            ConfigurationError: a stream has no group of that name (the message names the
                stream, the group and the stream's groups).
            SinkError / SinkUnavailableError: the server failed.
        """
        for stream in sorted(streams):
            names = server.group_names(stream)
            if names is not None and self.group not in names:
                raise ConfigurationError(
                    f"ackGroup {self.group!r} is not a consumer group of stream {stream!r} on {server.config.where()} "
                    f"(its groups: {', '.join(repr(n) for n in names) or 'none'}): the commit would create it and "
                    f"acknowledge there, while the source's own group moved only after Spark's commit. Set "
                    f"ackGroup to the source's group (option group of twopc-redis-stream), or drop ackGroup")

    def track(self, acks: dict[str, EntryId], streams: Iterable[Any], ids: Iterable[Any]) -> None:
        """Raise *acks* (stream -> highest id) to the rows' ids.

        Raises:
            ConfigurationError: a row has no stream or an id that is not an entry id.
        """
        for stream, raw in zip(streams, ids, strict=True):
            if stream is None or raw is None:
                raise ConfigurationError(f"ackGroup {self.group!r}: a row has a null {self.stream_column!r} or "
                                         f"{self.id_column!r}: every row must name the entry it was read from")
            eid = EntryId.parse(raw, what=f"column {self.id_column!r} (ackIdColumn)")
            acks[stream] = max(acks.get(stream, ZERO), eid)


def batch_acks(handles: Sequence[RedisHandle]) -> list[tuple[str, str]]:
    """The highest id per stream over *handles* (a decided batch), sorted by stream."""
    top: dict[str, EntryId] = {}
    for h in handles:
        for stream, raw in h.acks:
            top[stream] = max(top.get(stream, ZERO), EntryId.parse(raw))
    return sorted((s, str(e)) for s, e in top.items())
