"""The Redis Stream pipeline: producers -> Redis Streams -> Spark -> PostgreSQL + Redis counters.

``... pipeline job SPEC`` is one run of the job (``ChaosRunner`` starts and kills it): two
``availableNow`` queries read the streams with ``twopc-redis-stream``: ``pg`` writes a row per
entry, ``counters`` increments Redis counters with ``ackGroup`` (acknowledged in the same atomic
call). *SPEC* is a JSON file (mode 0600: it holds the URLs). Producers give entries the ids
``<epoch ms>-<n>``, so a retried append is refused, not duplicated: the streams are the truth
:func:`verify` checks."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["GROUPS", "PipelineSpec", "Verdict", "create_table", "main", "produce", "verify", "write_spec"]

#: Consumer group of each query.
GROUPS = {"pg": "twopc-pipeline-pg", "counters": "twopc-pipeline-counters"}
TAG = "pipe"
MAPPING = json.dumps([{"op": "INCRBY", "key": "{{pipe}}:entries", "by": 1},
                      {"op": "HINCRBY", "key": "{{pipe}}:per_n", "field": "{n}", "by": 1}])


@dataclass
class PipelineSpec:
    redis_url: str
    pg_url: str
    streams: list[str]
    table: str
    checkpoint: str
    max_per_trigger: int = 200
    partitions: int = 2
    extra_source_options: dict[str, str] = field(default_factory=dict)


def write_spec(spec: PipelineSpec, path: str | os.PathLike[str]) -> None:
    """Write *spec* to *path* with mode 0600 (it holds the URLs)."""
    with open(path, "w", opener=lambda name, flags: os.open(name, flags, 0o600)) as f:
        json.dump(spec.__dict__, f)


def create_table(pg_url: str, table: str) -> None:
    """(Re)create the target table with ``UNIQUE (stream, entry_id)``, the key the README recommends."""
    from ._bench_common import create_table as recreate
    recreate(pg_url, table, "stream text NOT NULL, entry_id text NOT NULL, n bigint NOT NULL, payload text, "
                            "UNIQUE (stream, entry_id)")


def _source(spark: Any, spec: PipelineSpec, group: str) -> Any:
    reader = (spark.readStream.format("twopc-redis-stream").option("url", spec.redis_url)
              .option("streams", ",".join(spec.streams)).option("group", group)
              .option("startingPosition", "earliest").option("maxEntriesPerTrigger", spec.max_per_trigger)
              .option("fieldsSchema", "n BIGINT, payload STRING")
              .option("createStreams", "true"))  # the producers start beside the job, not before it
    return reader.options(**spec.extra_source_options).load()


def run_job(spec: PipelineSpec) -> None:
    """One run: both queries to the end of what the streams hold now, then stop."""
    from ._job import crashable_spark, follow
    spark = crashable_spark("twopc-pipeline", spec.partitions)
    ck = Path(spec.checkpoint)
    pg = (_source(spark, spec, GROUPS["pg"]).selectExpr("stream", "id AS entry_id", "n", "payload")
          .writeStream.format("twopc-postgres").option("url", spec.pg_url).option("dbtable", spec.table)
          .option("checkpointLocation", str(ck / "pg")).trigger(availableNow=True).start())
    counters = (_source(spark, spec, GROUPS["counters"]).select("stream", "id", "n")
                .writeStream.format("twopc-redis").option("url", spec.redis_url).option("mapping", MAPPING)
                .option("hashTag", TAG).option("ackGroup", GROUPS["counters"])
                .option("checkpointLocation", str(ck / "counters"))
                .trigger(availableNow=True).start())
    follow({"pg": pg, "counters": counters}, "entries")
    spark.stop()


def produce(redis_url: str, streams: Sequence[str], count: int, *, rate: float | None = None) -> int:
    """Append entries ``n = 0 .. count-1`` round-robin to *streams* with ids ``<ms>-<n>``, at most *rate* a
    second, waiting out a Redis restart; returns how many."""
    import redis
    import redis.exceptions as rex
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    ms = int(time.time() * 1000)
    started = time.monotonic()
    try:
        for n in range(count):
            stream = streams[n % len(streams)]
            while True:
                try:
                    client.xadd(stream, {"n": str(n), "payload": f"event-{n}"}, id=f"{ms}-{n}")
                    break
                except rex.ResponseError as exc:
                    if "equal or smaller" in str(exc):
                        break  # the first try was applied; its reply was lost
                    raise
                except (rex.ConnectionError, rex.TimeoutError, rex.BusyLoadingError):
                    time.sleep(0.2)  # the server restarts (demo: SIGKILLed, restarted from its AOF)
            if rate:
                time.sleep(max(0.0, (n + 1) / rate - (time.monotonic() - started)))
    finally:
        client.close()
    return count


@dataclass
class Verdict:
    produced: int
    rows: int
    duplicates: list[int]
    lost: list[int]
    unexpected: list[int]
    counter_total: int
    counters_off: list[int]
    pending: dict[str, int]
    lag: dict[str, int]
    dangling_pg: list[str]
    dangling_redis: list[str]

    @property
    def ok(self) -> bool:
        """Exactly once everywhere, nothing pending, nothing left prepared."""
        return not (self.duplicates or self.lost or self.unexpected or self.counters_off
                    or self.counter_total != self.produced or any(self.pending.values())
                    or any(self.lag.values()) or self.dangling_pg or self.dangling_redis)

    def render(self) -> str:
        def few(xs: Sequence[Any]) -> str:
            return f"{len(xs)}" + (f" {list(xs)[:5]}" if xs else "")
        rows = [("entries produced (in the streams)", str(self.produced)),
                ("rows in PostgreSQL", str(self.rows)),
                ("duplicates", few(self.duplicates)), ("lost", few(self.lost)),
                ("unexpected", few(self.unexpected)),
                ("Redis counter {pipe}:entries", f"{self.counter_total} (expected {self.produced})"),
                ("per-entry counters not 1", few(self.counters_off)),
                ("entries pending in the groups", str(sum(self.pending.values()))),
                ("entries not yet acknowledged (lag)", str(sum(self.lag.values()))),
                ("dangling prepared transactions", str(len(self.dangling_pg) + len(self.dangling_redis))),
                ("verdict", "EXACTLY ONCE" if self.ok else "NOT EXACTLY ONCE")]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)


def verify(spec: PipelineSpec) -> Verdict:
    """Compare the streams with PostgreSQL, the Redis counters and both groups."""
    import redis
    import sqlalchemy as sa

    from twopc import CommitLedger
    from twopc.recovery import verify_postgres_ids
    from twopc.sinks.redis import RedisSink
    client: Any = redis.Redis.from_url(spec.redis_url)  # redis-py's command methods are loosely typed
    try:
        expected = {int(fields[b"n"]) for s in spec.streams for _eid, fields in client.xrange(s, "-", "+")}
        pending, lag = {}, {}
        for s in spec.streams:
            for g in client.xinfo_groups(s) if client.exists(s) else []:
                key = f"{s}/{g['name'].decode()}"
                pending[key] = int(g["pending"])
                lag[key] = len(client.xrange(s, f"({g['last-delivered-id'].decode()}", "+"))
        total = int(client.get("{pipe}:entries") or 0)
        per_n = {int(k): int(v) for k, v in client.hgetall("{pipe}:per_n").items()}
    finally:
        client.close()
    engine = sa.create_engine(spec.pg_url)
    try:
        sid = CommitLedger(str(Path(spec.checkpoint) / "pg")).recorded_sink_id() or "?"
        rows = verify_postgres_ids(engine, spec.table, expected, sink_id=sid, id_column="n")
    finally:
        engine.dispose()
    rsid = CommitLedger(str(Path(spec.checkpoint) / "counters")).recorded_sink_id()
    dangling_redis = []
    if rsid:
        with RedisSink(spec.redis_url, MAPPING, hash_tag=TAG) as sink:
            dangling_redis = [h.txn_id for h in sink.list_prepared(rsid)]
    return Verdict(
        produced=len(expected), rows=rows.found, duplicates=list(rows.duplicates), lost=list(rows.lost),
        unexpected=list(rows.unexpected), counter_total=total,
        counters_off=sorted(n for n in expected | set(per_n) if per_n.get(n, 0) != 1),
        pending=pending, lag=lag, dangling_pg=list(rows.dangling), dangling_redis=dangling_redis)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "job":
        print("usage: python -m twopc.recovery.demos.pipeline job SPEC.json", file=sys.stderr)
        return 2
    with open(args[1], encoding="utf-8") as f:
        spec = PipelineSpec(**json.load(f))
    run_job(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
