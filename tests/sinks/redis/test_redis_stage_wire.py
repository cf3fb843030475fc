"""The Redis sink's staging pipeline against a real redis-server: its arguments are encoded in
bulk (the same bytes redis-py would send, without redis-py's per-argument encoder), an error
reply keeps its slot, and a dropped connection is re-sent as redis-py's pipeline re-sends it.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest
import redis
import redis.connection
import redis.exceptions as rex

from twopc import CommitOutcome, TransactionContext
from twopc.sinks.redis import HSetOp, IncrByOp, RedisSink, XAddOp
from twopc.sinks.redis._wire import encode_commands, run_pipeline

SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string())])


def _sink(url: str, tag: str) -> RedisSink:
    t = "{{" + tag + "}}"
    sink = RedisSink(url, [HSetOp(f"{t}:row:{{id}}", columns=("payload",)), IncrByOp(f"{t}:total", 1),
                           XAddOp(f"{t}:events", columns=("id", "payload"))], hash_tag=tag)
    sink.validate(SCHEMA)
    return sink


def _rows(n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"id": i, "payload": f"p-{i}-é"} for i in range(n)], schema=SCHEMA)


def test_the_encoding_is_the_bytes_redis_py_sends() -> None:
    packer = redis.connection.PythonRespSerializer(6000, redis.connection.Encoder("utf-8", "strict", False).encode)
    cmds = [("ZADD", "k", "NX", 3, "txn"), ("FCALL", "f", 2, "a", b"\xff\x00raw", "é", 1.5, -7, "", 10**20)]
    assert encode_commands(cmds) == [b"".join(packer.pack(*c)) for c in cmds]
    for bad in (True, None, 1.5j):
        with pytest.raises(rex.DataError):
            packer.pack("SET", "k", bad)
        with pytest.raises(rex.DataError):
            encode_commands([("SET", "k", bad)])


def test_a_transaction_is_staged_without_redis_pys_per_argument_encoder(redis_url, r, monkeypatch) -> None:
    tag = "w" + uuid.uuid4().hex[:10]
    sink = _sink(redis_url, tag)
    packed: list[int] = []
    real = redis.connection.PythonRespSerializer.pack

    def counting(self: Any, *args: Any) -> Any:
        packed.append(len(args))
        return real(self, *args)

    monkeypatch.setattr(redis.connection.PythonRespSerializer, "pack", counting)
    txn = sink.begin_transaction(TransactionContext("s1", 0, 0, 1))
    sink.invoke_batch(txn, _rows(3000))
    handle = sink.pre_commit(txn)
    assert handle.staged > 3000 * 10
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
