"""``python -m twopc.recovery.demos.bench_redis``: the Redis sink's cost, in one run, on the same rows.

Throughput through the sink API (as the driver calls it) against plain pipelined writes of the same
effects, per row and with counters pre-summed (the fairer baseline); then how long a commit FCALL
blocks the server (``INFO commandstats``). A throwaway LocalRedis unless ``TWOPC_BENCH_REDIS_URL``."""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from ._bench_common import module_parser, server_url

__all__ = ["main"]

MAPPING_DOC = ("per row: HSET row:<id> payload amount; INCRBY total 1; HINCRBY per_category <c> 1; "
               "XADD events * id payload")


def _table(n: int, start: int = 0) -> Any:
    import pyarrow as pa
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "category": [f"c{i % 10}" for i in ids],
                     "payload": [f"payload-{i}" for i in ids], "amount": [i * 0.5 for i in ids]})


def _ops(tag: str) -> list[Any]:
    from twopc.sinks.redis import HIncrByOp, HSetOp, IncrByOp, XAddOp
    t = "{{" + tag + "}}"
    return [HSetOp(f"{t}:row:{{id}}", columns=("payload", "amount")), IncrByOp(f"{t}:total", 1),
            HIncrByOp(f"{t}:per_category", "{category}", 1), XAddOp(f"{t}:events", columns=("id", "payload"))]


def bench_sink(url: str, table: Any, partitions: int) -> float:
    """Seconds to write *table* through the sink API in *partitions* transactions."""
    from twopc import CommitOutcome, TransactionContext
    from twopc.sinks.redis import RedisSink
    tag = "bs" + uuid.uuid4().hex[:8]
    sink = RedisSink(url, _ops(tag), hash_tag=tag)
    sink.validate(table.schema)
    per = -(-table.num_rows // partitions)
    started = time.perf_counter()
    handles = []
    for p in range(partitions):
        txn = sink.begin_transaction(TransactionContext("bench", 0, p, p))
        for rb in table.slice(p * per, per).to_batches(max_chunksize=10_000):
            sink.invoke_batch(txn, rb)
        handles.append(sink.pre_commit(txn))
    assert sink.commit_all(handles) == [CommitOutcome.COMMITTED] * partitions  # one call, as the driver commits
    elapsed = time.perf_counter() - started
    _check(url, tag, table.num_rows)
    return elapsed


def bench_plain(url: str, table: Any, *, presum: bool) -> float:
    """Seconds to write the same effects with pipelined commands (1000 rows per round trip)."""
    import redis
    tag = "bp" + uuid.uuid4().hex[:8]
    t = "{" + tag + "}"
    r = redis.Redis.from_url(url)
    started = time.perf_counter()
    ids, cats = table.column("id").to_pylist(), table.column("category").to_pylist()
    pays, amts = table.column("payload").to_pylist(), table.column("amount").to_pylist()
    pipe = r.pipeline(transaction=False)
    counts: dict[str, int] = {}
    for i, (id_, cat, pay, amt) in enumerate(zip(ids, cats, pays, amts, strict=True)):
        pipe.hset(f"{t}:row:{id_}", mapping={"payload": pay, "amount": repr(amt)})
        pipe.xadd(f"{t}:events", {"id": str(id_), "payload": pay})
        if presum:
            counts[cat] = counts.get(cat, 0) + 1
        else:
            pipe.incrby(f"{t}:total", 1)
            pipe.hincrby(f"{t}:per_category", cat, 1)
        if i % 1000 == 999:
            pipe.execute()
    if presum:
        pipe.incrby(f"{t}:total", len(ids))
        for cat, c in counts.items():
            pipe.hincrby(f"{t}:per_category", cat, c)
    pipe.execute()
    elapsed = time.perf_counter() - started
    r.close()
    _check(url, tag, table.num_rows)
    return elapsed


def _check(url: str, tag: str, rows: int) -> None:
    import redis
    r = redis.Redis.from_url(url)
    t = "{" + tag + "}"
    assert int(r.get(f"{t}:total") or 0) == rows and r.xlen(f"{t}:events") == rows
    r.close()


def _fcall_usec(r: Any) -> float:
    return float(r.info("commandstats").get("cmdstat_fcall", {}).get("usec", 0.0))


def bench_commit_block(url: str, *, fields: int, repeats: int) -> dict[str, float]:
    """Server-side ms of one commit FCALL: *fields* HSET fields, *fields* mixed rows, and a replay."""
    import redis

    from twopc import TransactionContext
    from twopc.sinks.redis import HSetOp, RedisSink
    r = redis.Redis.from_url(url)
    out: dict[str, list[float]] = {"hset": [], "mixed": [], "replay": []}
    table = _table(fields)
    for k in range(repeats):
        tag = "bb" + uuid.uuid4().hex[:8]
        t = "{{" + tag + "}}"
        for name, ops in (("hset", [HSetOp(f"{t}:big", fields={"f{id}": "{payload}"})]), ("mixed", _ops(tag))):
            sink = RedisSink(url, ops, hash_tag=tag)
            txn = sink.begin_transaction(TransactionContext("bench", k, 0, 0))
            for rb in table.to_batches(max_chunksize=10_000):
                sink.invoke_batch(txn, rb)
            h = sink.pre_commit(txn)
            r.config_resetstat()
            sink.commit(h)
            out[name].append(_fcall_usec(r) / 1000)
            if name == "hset":
                r.config_resetstat()
                sink.commit(h)
                out["replay"].append(_fcall_usec(r) / 1000)
    r.close()
    return {k: statistics.median(v) for k, v in out.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench_redis", __doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4, help="transactions the rows are split into")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    from twopc.faultinject import LocalRedis
    given = os.environ.get("TWOPC_BENCH_REDIS_URL")
    with server_url(given, functools.partial(LocalRedis, appendfsync="always")) as url:
        table = _table(args.rows)
        print(f"bench: {args.rows} rows, {args.partitions} transactions; {MAPPING_DOC}")
        print(f"bench: redis {'from TWOPC_BENCH_REDIS_URL' if given else 'throwaway, appendfsync always'}")
        sink_s, plain_s, presum_s = [], [], []
        for _ in range(args.repeats):  # interleaved, so drift hits all three alike
            sink_s.append(bench_sink(url, table, args.partitions))
            plain_s.append(bench_plain(url, table, presum=False))
            presum_s.append(bench_plain(url, table, presum=True))
        rate = {name: args.rows / statistics.median(v)
                for name, v in (("sink", sink_s), ("plain", plain_s), ("presum", presum_s))}
        print(f"  twopc-redis sink API (stage + prepare + commit)   {rate['sink']:>10,.0f} rows/s")
        print(f"  plain pipelined, one command per effect per row   {rate['plain']:>10,.0f} rows/s")
        print(f"  plain pipelined, counters pre-summed              {rate['presum']:>10,.0f} rows/s")
        print(f"  ratio sink / plain per row                        {rate['sink'] / rate['plain']:>10.2f}x")
        print(f"  ratio sink / plain pre-summed                     {rate['sink'] / rate['presum']:>10.2f}x")
        from ._bench_results import record
        for key, base in (("redis.sink_vs_plain_per_row", "plain"), ("redis.sink_vs_plain_presummed", "presum")):
            record(key, rate["sink"] / rate[base], f"{rate['sink']:,.0f} / {rate[base]:,.0f} rows/s, "
                                                   f"median of {args.repeats}")
        block = bench_commit_block(url, fields=10_000, repeats=args.repeats)
        print("commit blocks the server (server-side FCALL time, median):")
        print(f"  10k HSET fields in one hash                       {block['hset']:>10.1f} ms")
        print(f"  10k rows of the mapping (20k HSET fields, 10k XADD) {block['mixed']:>10.1f} ms")
        print(f"  already-committed replay                          {block['replay']:>10.2f} ms")
        return 0


if __name__ == "__main__":
    sys.exit(main())
