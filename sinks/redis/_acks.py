"""Option ``ackGroup``: which source entries a transaction's rows came from.

Every row carries its stream key and entry id (``ackStreamColumn``/``ackIdColumn``); the handle carries the highest id
per stream, and the batch's last commit call acknowledges up to it (:mod:`._lua`). That is safe: every entry at or
below it was written by this batch or an earlier committed one, or filtered out by the query.
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
        """None without ``ackGroup``; ConfigurationError for a column option without it."""
        if not group:
            if stream_column or id_column:
                raise ConfigurationError("ackStreamColumn and ackIdColumn name the source columns of option ackGroup: "
                                         "set ackGroup (the consumer group twopc-redis-stream reads with) or drop them")
            return None
        return cls(group, stream_column or "stream", id_column or "id")

    def check_schema(self, schema: pa.Schema) -> None:
        """SchemaMismatchError unless both columns exist and are strings."""
        for option, col in (("ackStreamColumn", self.stream_column), ("ackIdColumn", self.id_column)):
            i = schema.get_field_index(col)
            if i < 0 or schema.field(i).type not in (pa.string(), pa.large_string()):
                raise SchemaMismatchError(
                    f"ackGroup {self.group!r} acknowledges each row's source entry, read from string column "
                    f"{col!r} ({option}); the DataFrame has {schema.names}: keep twopc-redis-stream's stream "
                    f"and id columns in the rows, or name them with {option}")

    def check_groups(self, server: StreamServer, streams: Iterable[str]) -> None:
        """ConfigurationError unless every existing source stream has the group: the commit's
        acknowledgement would create a misspelled one (a deleted stream is the source's to report)."""
        for stream in sorted(streams):
            names = server.group_names(stream)
            if names is not None and self.group not in names:
                raise ConfigurationError(
                    f"ackGroup {self.group!r} is not a consumer group of stream {stream!r} on {server.config.where()} "
                    f"(its groups: {', '.join(repr(n) for n in names) or 'none'}): the commit would create it and "
                    f"acknowledge there, while the source's own group moved only after Spark's commit. Set "
                    f"ackGroup to the source's group (option group of twopc-redis-stream), or drop ackGroup")

    def track(self, acks: dict[str, EntryId], streams: Iterable[Any], ids: Iterable[Any]) -> None:
        """Raise *acks* (stream -> highest id) to the rows' ids; ConfigurationError for a null or bad id."""
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
