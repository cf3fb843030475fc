"""A streaming query into the ``twopc-redis`` sink, for the crash matrix, plus its verifier.

``python -m recovery.demos.redis_job job --input DIR --checkpoint DIR --tag TAG`` is one run of
the query (what :class:`faultinject.ChaosRunner` starts and kills): JSON input files as
written by :func:`recovery.demos.demo.write_input` (``id, payload, amount``), one file per
micro-batch (``maxFilesPerTrigger=1``), ``availableNow``, ``repartition(2)``. The Redis URL
comes from ``TWOPC_REDIS_JOB_URL`` so a password never shows on a command line. Per row:

- ``INCRBY {TAG}:total 1``
- ``HINCRBY {TAG}:per_category c<id % 3> 1``
- ``HSET {TAG}:row:<id> payload <payload> amount <amount>``
- ``XADD {TAG}:events * id <id> payload <payload>``

:func:`verify_redis` then checks exactly-once: the counters equal the number of source
rows, every row hash exists, the stream holds every id once, and no staging is left.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ENV_URL", "RedisVerification", "job_mapping", "main", "run_job", "verify_redis"]

ENV_URL = "TWOPC_REDIS_JOB_URL"


def job_mapping(tag: str) -> str:
    """The ``mapping`` option of the job, for hash tag *tag* (without braces)."""
    from sinks.redis import HIncrByOp, HSetOp, IncrByOp, XAddOp, mapping_json

    t = "{{" + tag + "}}"
    return mapping_json([
        IncrByOp(f"{t}:total", 1),
        HIncrByOp(f"{t}:per_category", "{category}", 1),
        HSetOp(f"{t}:row:{{id}}", columns=("payload", "amount")),
        XAddOp(f"{t}:events", columns=("id", "payload")),
    ])


def run_job(input_dir: str, checkpoint: str, tag: str, partitions: int) -> None:
    """One run of the streaming query into Redis: all available input, then stop."""
    from ._job import crashable_spark, run_stream_to_end

    url = os.environ[ENV_URL]
    spark = crashable_spark("twopc-redis-job", partitions)
    run_stream_to_end(spark, input_dir, checkpoint, partitions, lambda df: (
        df.selectExpr("id", "payload", "amount", "concat('c', cast(id % 3 as string)) as category")
        .writeStream.format("twopc-redis").option("url", url).option("mapping", job_mapping(tag))
        .option("hashTag", tag).option("requireSameSlot", "true")))


@dataclass
class RedisVerification:
    """What :func:`verify_redis` found."""

    expected: int
    total_counter: int | None
    category_counters: dict[str, int]
    expected_categories: dict[str, int]
    rows_found: int
    rows_wrong: list[int] = field(default_factory=list)
    rows_unexpected: int = 0
    stream_entries: int = 0
    stream_duplicates: list[int] = field(default_factory=list)
    stream_lost: list[int] = field(default_factory=list)
    stream_unexpected: list[int] = field(default_factory=list)
    dangling: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every effect is there exactly once and nothing is left staged."""
        return (self.total_counter == self.expected and self.category_counters == self.expected_categories
                and self.rows_found == self.expected and not self.rows_wrong and not self.rows_unexpected
                and self.stream_entries == self.expected and not self.stream_duplicates
                and not self.stream_lost and not self.stream_unexpected and not self.dangling)

    def render(self) -> str:
        """A human-readable report."""
        lines = [
            f"  rows expected                 {self.expected}",
            f"  total counter                 {self.total_counter}",
            f"  per-category counters         {self.category_counters} (expected {self.expected_categories})",
            (f"  row hashes found              {self.rows_found} (wrong {self.rows_wrong[:10]}, "
             f"unexpected {self.rows_unexpected})"),
            (f"  stream entries                {self.stream_entries} (duplicates {self.stream_duplicates[:10]}, "
             f"lost {self.stream_lost[:10]}, unexpected {self.stream_unexpected[:10]})"),
            f"  staging left                  {self.dangling[:10]}",
            f"  verdict: {'EXACTLY ONCE' if self.ok else 'VIOLATED'}",
        ]
        return "\n".join(lines)


def verify_redis(url: str, tag: str, ids: Sequence[int], *, sink_id: str | None = None) -> RedisVerification:
    """Check the job's effects under hash tag *tag* against the source *ids*."""
    import redis

    r: Any = redis.Redis.from_url(url, decode_responses=True)
    try:
        t = "{" + tag + "}"
        total = r.get(f"{t}:total")
        cats = {k: int(v) for k, v in r.hgetall(f"{t}:per_category").items()}
        want_cats = dict(Counter(f"c{i % 3}" for i in ids))
        pipe = r.pipeline(transaction=False)
        for i in ids:
            pipe.hgetall(f"{t}:row:{i}")
        rows = pipe.execute()
        found = sum(1 for h in rows if h)
        wrong = [i for i, h in zip(ids, rows, strict=True)
                 if h and (h.get("payload") != f"event-{i}" or float(h.get("amount", "nan")) != i * 0.5)]
        row_keys = sum(1 for _ in r.scan_iter(match=f"{t}:row:*", count=1000))
        entries = r.xrange(f"{t}:events")
        seen = Counter(int(fields["id"]) for _, fields in entries)
        idset = set(ids)
        dangling = [k for k in r.scan_iter(match=f"{t}:*", count=1000) if ":staging:" in k]
        for k in r.scan_iter(match=f"{t}:*:txns", count=1000):
            dangling += [f"{k} {m}" for m in r.zrange(k, 0, -1)]
        for k in r.scan_iter(match=f"{t}:*:prepared", count=1000):
            dangling += [f"{k} {m}" for m in r.hkeys(k)]
        if sink_id is not None:
            dangling = [d for d in dangling if f":{sink_id}:" in d or sink_id not in d]
        return RedisVerification(
            expected=len(ids), total_counter=int(total) if total is not None else None,
            category_counters=cats, expected_categories=want_cats, rows_found=found, rows_wrong=wrong,
            rows_unexpected=row_keys - found, stream_entries=len(entries),
            stream_duplicates=sorted(i for i, c in seen.items() if c > 1),
            stream_lost=sorted(idset - set(seen)), stream_unexpected=sorted(set(seen) - idset),
            dangling=sorted(dangling),
        )
    finally:
        r.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recovery.demos.redis_job", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    job = sub.add_parser("job", help="one run of the streaming query (used by the chaos runner)")
    job.add_argument("--input", required=True)
    job.add_argument("--checkpoint", required=True)
    job.add_argument("--tag", required=True, help="hash tag of every key (without braces)")
    job.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args(argv)
    run_job(args.input, args.checkpoint, args.tag, args.partitions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
