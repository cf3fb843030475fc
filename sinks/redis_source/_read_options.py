"""The options of ``format("twopc-redis-stream")`` (the manual's options reference)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from twopc import ConfigurationError

from .._options import OptionReader
from .._redis.clients import ClientConfig, split_url
from .._redis.ids import EntryId
from .._secrets import redacted_errors
from ._fields_schema import check_fields_schema

__all__ = ["FORMAT_NAME", "OPTIONS", "StreamOptions", "check_pyspark"]

FORMAT_NAME = "twopc-redis-stream"

OPTIONS = ("url", "password", "streams", "createStreams", "group", "startingPosition", "maxEntriesPerTrigger",
           "maxEntriesPerPartition", "failOnDataLoss", "trimAfterCommit", "fieldsSchema", "socketTimeout",
           "connectTimeout")

#: Why option ``consumer`` is refused (see the README's "Reading a Redis Stream exactly once").
NO_CONSUMER = ("twopc-redis-stream takes no option consumer: it never reads with XREADGROUP (it reads the ranges "
               "recorded in Spark's checkpoint with XRANGE), so no entry is ever delivered to, or pending for, "
               "a consumer of the group. The group only mirrors the query's committed progress (last-delivered-id "
               "and XACK after the sink committed); the in-flight batch shows as the group's lag in XINFO GROUPS. "
               "Remove the option")

_GLOB = re.compile(r"[*?\[]")
_POSITIONS = ("group", "earliest", "latest")


@dataclass(frozen=True)
class StreamOptions:
    """What the source was asked to do (the options reference says what each option means)."""

    client: ClientConfig
    streams: tuple[str, ...]
    pattern: str | None
    group: str
    starting: str | EntryId
    max_per_trigger: int | None
    max_per_partition: int
    fail_on_data_loss: bool
    trim_after_commit: bool
    fields_schema: str = field(default="")
    create_streams: bool = False

    @classmethod
    def read(cls, options: Mapping[str, str]) -> StreamOptions:
        """Parse Spark's options; MissingOptionError (``url``, ``streams``, ``group``) or
        ConfigurationError for an invalid or unknown one, never showing the password."""
        with redacted_errors(options):
            o = OptionReader(options, FORMAT_NAME)
            for name in OPTIONS:
                o.get(name)
            if o.get("consumer") is not None:
                raise ConfigurationError(NO_CONSUMER)
            o.refuse_unknown()
            url, url_password = split_url(o.required("url", '.option("url", "redis://host:6379/0")'))
            password = o.get("password")
            names = [s.strip() for s in o.required("streams", '.option("streams", "orders")').split(",") if s.strip()]
            patterns = [s for s in names if _GLOB.search(s)]
            if patterns and len(names) > 1:
                raise ConfigurationError(f"streams is either a list of keys or one glob pattern, got {names!r:.200}")
            start_raw = o.text("startingPosition", "group") or "group"
            starting: str | EntryId = (start_raw.lower() if start_raw.lower() in _POSITIONS
                                       else EntryId.parse(start_raw, "startingPosition (group, earliest, latest "
                                                                     "or an entry id)"))
            max_trigger = o.integer("maxEntriesPerTrigger", 0, minimum=1) if o.text("maxEntriesPerTrigger") else None
            fields_schema = o.text("fieldsSchema", "") or ""
            check_fields_schema(fields_schema)
            timeouts = [o.duration(n, d) for n, d in (("socketTimeout", "60s"), ("connectTimeout", "10s"))]
            if any(t.ms <= 0 for t in timeouts):
                raise ConfigurationError("socketTimeout and connectTimeout must be > 0")
            return cls(
                client=ClientConfig(url, password if password is not None else url_password,
                                    timeouts[0].seconds, timeouts[1].seconds),
                streams=tuple(names) if not patterns else (), pattern=patterns[0] if patterns else None,
                group=o.required("group", '.option("group", "spark-orders")'), starting=starting,
                max_per_trigger=max_trigger, max_per_partition=o.integer("maxEntriesPerPartition", 10_000, minimum=1),
                fail_on_data_loss=o.boolean("failOnDataLoss", True),
                trim_after_commit=o.boolean("trimAfterCommit", False), fields_schema=fields_schema,
                create_streams=o.boolean("createStreams", False))


def check_pyspark() -> None:
    """Raise :class:`~twopc.ConfigurationError` on PySpark < 4.2 (no ``latestOffset(start, limit)``)."""
    import pyspark
    if tuple(int(x) for x in pyspark.__version__.split(".")[:2]) < (4, 2):
        raise ConfigurationError(f"twopc-redis-stream needs PySpark 4.2 or newer (latestOffset(start, limit) for "
                                 f"admission control); this is PySpark {pyspark.__version__}")
