"""Rows the Redis sink refuses (a null or out-of-range counter delta on one entry), at the
sink against a real redis-server: without ``deadLetterStream`` the task fails naming the
entry; with it the refused rows become entries of the dead-letter stream, staged in the same
transaction (added by the commit's FCALL, dropped by a rollback). No Spark."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pytest
import redis

from twopc import CommitOutcome, ConfigurationError, TransactionContext
from twopc.sinks.redis import HIncrByOp, RedisSink, SetOp

SCHEMA = pa.schema([("stream", pa.string()), ("id", pa.string()), ("user", pa.string()), ("amount", pa.int64())])
GOOD = [("1-0", "u1", 5), ("2-0", "u2", 7)]
BAD = [("3-0", "u1", None), ("4-0", "u2", 2 * 10**18), ("5-0", "u1", 11), ("6-0", "u1", None)]


def _batch(rows: Sequence[tuple[str, str, int | None]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"stream": "orders", "id": i, "user": u, "amount": a} for i, u, a in rows],
                                      schema=SCHEMA)


@pytest.fixture
def tag() -> str:
    return "dl" + uuid.uuid4().hex[:10]


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def _sink(url: str, tag: str, **kw: Any) -> RedisSink:
    t = "{{" + tag + "}}"
    sink = RedisSink(url, [HIncrByOp(f"{t}:spent", field="{user}", by="{amount}"),
                           SetOp(t + ":last:{user}", value="{id}")], hash_tag=tag, **kw)
    sink.validate(SCHEMA)
    return sink


def _prepare(sink: RedisSink, *batches: pa.RecordBatch, batch: int = 3) -> Any:
    txn = sink.begin_transaction(TransactionContext("s1", batch, 0, 1))
    for b in batches:
        sink.invoke_batch(txn, b)
    return sink.pre_commit(txn)


def test_without_dead_letter_a_refused_row_fails_naming_its_entry(redis_url, r, tag):
    sink = _sink(redis_url, tag)
    with pytest.raises(ConfigurationError, match=r"^entry orders 3-0: column 'amount' is null"):
        _prepare(sink, _batch(GOOD), _batch(BAD))


def test_dead_letter_stream_takes_refused_rows_in_the_same_commit(redis_url, r, tag):
    t = "{" + tag + "}"
    sink = _sink(redis_url, tag, dead_letter_stream=f"{t}:dead")
    h = _prepare(sink, _batch(GOOD), _batch(BAD))
    assert r.exists(f"{t}:dead") == 0  # staged, not applied
    assert sink.commit(h) is CommitOutcome.COMMITTED
    assert r.hgetall(f"{t}:spent") == {"u1": "16", "u2": "7"}
    assert (r.get(f"{t}:last:u1"), r.get(f"{t}:last:u2")) == ("5-0", "2-0")  # refused rows change nothing
    dead = [f for _, f in r.xrange(f"{t}:dead")]
    assert [(f["stream"], f["id"], f["sink"], f["batch"], f["partition"]) for f in dead] == [
        ("orders", "3-0", "s1", "3", "0"), ("orders", "4-0", "s1", "3", "0"), ("orders", "6-0", "s1", "3", "0")]
    assert "is null" in dead[0]["reason"] and "outside" in dead[1]["reason"]
    assert '"amount": null' in dead[0]["row"]
    assert sink.commit(h) is CommitOutcome.ALREADY_COMMITTED
    assert r.xlen(f"{t}:dead") == 3


def test_dead_letters_roll_back_with_their_transaction(redis_url, r, tag):
    t = "{" + tag + "}"
    sink = _sink(redis_url, tag, dead_letter_stream=f"{t}:dead")
    sink.abort(_prepare(sink, _batch(BAD)))
    assert r.exists(f"{t}:dead", f"{t}:spent") == 0


def test_dead_letter_stream_outside_the_slot_is_refused(redis_url, tag):
    with pytest.raises(ConfigurationError, match=r"deadLetterStream 'elsewhere:dead' hashes to cluster slot"):
        _sink(redis_url, tag, dead_letter_stream="elsewhere:dead", require_same_slot=True)


def test_batches_folded_through_the_dead_letter_path_write_what_the_plain_path_writes(redis_url, r):
    """With deadLetterStream a batch is folded into a scratch copy and merged: every op of the
    mapping must end as folding straight in would (the same rows, overlapping keys across
    batches, once each way)."""
    from .test_redis_sink import SCHEMA as ALL_SCHEMA
    from .test_redis_sink import _all_ops, _rows

    got = []
    for dead in (False, True):
        tag = "dm" + uuid.uuid4().hex[:10]
        t = "{" + tag + "}"
        sink = RedisSink(redis_url, _all_ops(tag), hash_tag=tag, dead_letter_stream=f"{t}:dead" if dead else None)
        sink.validate(ALL_SCHEMA)
        txn = sink.begin_transaction(TransactionContext("s1", 0, 0, 1))
        for start in (0, 7, 3):  # overlapping ids: HSET/ZADD/SET keys written by several batches
            sink.invoke_batch(txn, pa.RecordBatch.from_pylist(_rows(9, start), schema=ALL_SCHEMA))
        assert sink.commit(sink.pre_commit(txn)) is CommitOutcome.COMMITTED
        state = {}
        for key in r.scan_iter(match=t + "*"):
            name, kind = key[len(t):], r.type(key)
            if ":twopc" in name or name.startswith(":s1") or kind == "none":
                continue
            state[name] = (r.get(key) if kind == "string" else r.hgetall(key) if kind == "hash"
                           else r.lrange(key, 0, -1) if kind == "list" else r.zrange(key, 0, -1, withscores=True)
                           if kind == "zset" else [f for _, f in r.xrange(key)])
        got.append(state)
    assert got[0] and got[0] == got[1]
