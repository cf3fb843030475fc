"""The Redis sink's staging pipeline against a real redis-server: a transaction's arguments reach
redis-py packed into a few elements, every op writes the exact bytes of its cells, an error reply
keeps its slot, and a dropped connection is re-sent as redis-py's pipeline re-sends it.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgpack
import pyarrow as pa
import pytest
import redis
import redis.connection
import redis.exceptions as rex

from twopc import CommitOutcome, TransactionContext
from twopc.sinks.redis import HSetOp, IncrByOp, RedisSink, RPushOp, SetOp, XAddOp, ZAddOp
from twopc.sinks.redis._server import run_pipeline

SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string())])


def _sink(url: str, tag: str) -> RedisSink:
    t = "{{" + tag + "}}"
    sink = RedisSink(url, [HSetOp(f"{t}:row:{{id}}", columns=("payload",)), IncrByOp(f"{t}:total", 1),
                           XAddOp(f"{t}:events", columns=("id", "payload"))], hash_tag=tag)
    sink.validate(SCHEMA)
    return sink


def _rows(n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"id": i, "payload": f"p-{i}-é"} for i in range(n)], schema=SCHEMA)


def test_a_transaction_reaches_redis_py_as_a_few_packed_arguments(redis_url, r, monkeypatch) -> None:
    tag = "w" + uuid.uuid4().hex[:10]
    sink = _sink(redis_url, tag)
    packed: list[int] = []

    def counting(real: Any) -> Any:
        def pack(self: Any, *args: Any) -> Any:
            packed.append(len(args))
            return real(self, *args)
        return pack

    for serializer in (redis.connection.PythonRespSerializer, redis.connection.HiredisRespSerializer):
        monkeypatch.setattr(serializer, "pack", counting(serializer.pack))
    txn = sink.begin_transaction(TransactionContext("s1", 0, 0, 1))
    sink.invoke_batch(txn, _rows(3000))
    handle = sink.pre_commit(txn)
    raw = redis.Redis.from_url(redis_url)
    staged = [msgpack.unpackb(e) for e in raw.lrange(sink.keys_for("s1").staging(handle.txn_id), 0, -1)]
    raw.close()
    assert len(staged) == handle.staged and sum(len(args) for p in staged for args in p[1::2]) > 3000 * 10
    assert sum(packed) < 100, f"redis-py encoded {sum(packed)} arguments one by one"
    assert sink.commit_all([handle]) == [CommitOutcome.COMMITTED]
    assert int(r.get(f"{{{tag}}}:total")) == 3000 and r.xlen(f"{{{tag}}}:events") == 3000
    assert r.hget(f"{{{tag}}}:row:2999", "payload").decode() == "p-2999-é"


def test_an_error_reply_keeps_its_slot_and_the_connection_stays_usable(redis_url, r) -> None:
    key = "w" + uuid.uuid4().hex[:10]
    r.set(key, "not a number")
    client = redis.Redis.from_url(redis_url)
    try:
        replies = run_pipeline(client, [("SET", key + ":a", "1"), ("INCR", key), ("INCRBY", key + ":a", 2)])
        assert replies[0] is True or replies[0] == b"OK"
        assert isinstance(replies[1], rex.ResponseError)
        assert replies[2] == 3
        assert client.get(key + ":a") == b"3"  # the pooled connection is in step
    finally:
        client.close()


def test_a_killed_connection_is_re_sent_as_redis_pys_pipeline_does(redis_url, r) -> None:
    key = "w" + uuid.uuid4().hex[:10]
    client = redis.Redis.from_url(redis_url, client_name=key)
    try:
        client.ping()
        r.client_kill_filter(_id=next(c["id"] for c in r.client_list() if c["name"] == key))
        assert run_pipeline(client, [("RPUSH", key, "a", "b"), ("LLEN", key)]) == [2, 2]
        assert client.lrange(key, 0, -1) == [b"a", b"b"]
    finally:
        client.close()


def test_a_new_connection_does_not_look_up_installed_distributions(redis_url, r, monkeypatch) -> None:
    """redis-py finds its own version in the installed distributions for every connection
    unless told it: on a Spark worker that scans the zip files on its path each time."""
    import importlib.metadata

    from twopc.sinks._redis.clients import ClientConfig

    def refuse(name: str) -> str:
        raise AssertionError(f"looked up the version of {name} in the installed distributions")

    monkeypatch.setattr(importlib.metadata, "version", refuse)
    pooled = ClientConfig(redis_url, None, 5.0, 5.0)._open()
    try:
        assert pooled.client.ping()
        shown = pooled.client.client_info().get("lib-ver", redis.__version__)  # Redis >= 7.2 shows it
        assert shown == redis.__version__
    finally:
        pooled.client.close()


@pytest.mark.parametrize("script_mode", ["function", "eval"])
def test_every_op_writes_the_exact_bytes_of_its_cells(redis_url, script_mode) -> None:
    """The staged writes reach Redis packed in MessagePack, which the server decodes with its own
    ``cmsgpack``: raw bytes (not UTF-8, NUL, empty), non-ASCII text, and numbers Lua would round
    must arrive as the bytes the row holds."""
    tag = "w" + uuid.uuid4().hex[:10]
    t = "{{" + tag + "}}"
    schema = pa.schema([("id", pa.int64()), ("raw", pa.binary()), ("text", pa.string()), ("big", pa.int64()),
                        ("x", pa.float64())])
    rows = [{"id": 1, "raw": b"\xff\x00\xfe", "text": "é€😀", "big": 2**59 + 1, "x": 0.1 + 0.2},
            {"id": 2, "raw": b"", "text": "", "big": -(2**53) - 1, "x": 1e300}]
    ops = [SetOp(f"{t}:s:{{id}}", "{raw}"), HSetOp(f"{t}:h:{{id}}", columns=("raw", "text", "big")),
           XAddOp(f"{t}:e", columns=("raw", "x")), RPushOp(f"{t}:l", "{raw}"), ZAddOp(f"{t}:z", "{text}", "{x}"),
           IncrByOp(f"{t}:n", "{big}")]
    sink = RedisSink(redis_url, ops, hash_tag=tag, script_mode=script_mode)
    sink.validate(schema)
    txn = sink.begin_transaction(TransactionContext("s1", 0, 0, 1))
    sink.invoke_batch(txn, pa.RecordBatch.from_pylist(rows, schema=schema))
    assert sink.commit_all([sink.pre_commit(txn)]) == [CommitOutcome.COMMITTED]
    r = redis.Redis.from_url(redis_url)
    try:
        p = "{" + tag + "}"
        assert [r.get(f"{p}:s:{i}") for i in (1, 2)] == [b"\xff\x00\xfe", b""]
        assert r.hgetall(f"{p}:h:1") == {b"raw": b"\xff\x00\xfe", b"text": "é€😀".encode(),
                                         b"big": b"576460752303423489"}
        assert r.hgetall(f"{p}:h:2") == {b"raw": b"", b"text": b"", b"big": b"-9007199254740993"}
        entries = r.xrange(f"{p}:e") or []
        assert [fields for _, fields in entries] == [{b"raw": b"\xff\x00\xfe", b"x": b"0.30000000000000004"},
                                                    {b"raw": b"", b"x": b"1e+300"}]
        assert r.lrange(f"{p}:l", 0, -1) == [b"\xff\x00\xfe", b""]
        assert r.zrange(f"{p}:z", 0, -1, withscores=True) == [("é€😀".encode(), 0.30000000000000004), (b"", 1e300)]
        assert r.get(f"{p}:n") == str(2**59 + 1 - 2**53 - 1).encode()
    finally:
        r.close()
