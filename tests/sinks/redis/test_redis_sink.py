"""The Redis sink against a real redis-server (no fakes): what only this sink does (the
mapping's ops, chunked commits, bad input refused with nothing applied, server
configuration checks, restarts and a SIGKILL of the server between pre_commit and commit).
The protocol contract every sink shares (lost, abort, list_prepared, envelope, pickling,
coordinator and recovery) runs through the conformance kit in test_kit_sinks.py."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import msgpack
import pyarrow as pa
import pytest
import redis

from twopc import CommitCoordinator, CommitLedger, CommitOutcome, ConfigurationError, TransactionContext
from twopc.faultinject import LocalRedis
from twopc.sinks._options import Duration
from twopc.sinks.redis import (
    HIncrByOp,
    HSetOp,
    IncrByOp,
    RedisDataSource,
    RedisHandle,
    RedisOp,
    RedisSink,
    RedisTargetError,
    RPushOp,
    SetOp,
    XAddOp,
    ZAddOp,
    key_slot,
    mapping_json,
    parse_mapping,
)
from twopc.spi import MissingOptionError, SchemaMismatchError, SinkUnavailableError, TargetConfigurationError
from twopc.spi.runtime import dumps_handle, loads_handle

LIBRARY_NAME = "twopc_redis_v2"  # the FUNCTION library, part of the on-server format
MAX_ARGS = 1000  # arguments per staged group at most (the staging format the library reads)

SCHEMA = pa.schema([("id", pa.int64()), ("category", pa.string()), ("qty", pa.int64()),
                    ("payload", pa.string()), ("score", pa.float64())])


def _rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"id": i, "category": f"c{i % 3}", "qty": i % 5 + 1, "payload": f"p{i}", "score": i * 0.5}
            for i in range(start, start + n)]


def _batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=SCHEMA)


def _all_ops(tag: str) -> list[RedisOp]:
    t = "{{" + tag + "}}"
    return [
        IncrByOp(f"{t}:total", 1),
        HIncrByOp(f"{t}:cat", "{category}", "{qty}"),
        HSetOp(f"{t}:row:{{id}}", columns=("payload", "qty")),
        XAddOp(f"{t}:events", fields={"id": "{id}", "p": "{payload}"}),
        RPushOp(f"{t}:log", "{id}:{payload}"),
        ZAddOp(f"{t}:top", "{id}", "{score}"),
        SetOp(f"{t}:last:{{category}}", "{payload}", ttl=3600),
    ]


@pytest.fixture
def tag() -> str:
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def _sink(url: str, tag: str, ops: list[RedisOp] | None = None, **kw: Any) -> RedisSink:
    return RedisSink(url, ops if ops is not None else _all_ops(tag), hash_tag=tag, **kw)


def _prepare(sink: RedisSink, rows: list[dict[str, Any]], *, sink_id: str = "s1", batch: int = 0,
             partition: int = 0, attempt: int = 1) -> RedisHandle:
    txn = sink.begin_transaction(TransactionContext(sink_id, batch, partition, attempt))
    sink.invoke_batch(txn, _batch(rows))
    return sink.pre_commit(txn)


def _tagged(r: redis.Redis, tag: str) -> list[str]:
    return sorted(r.scan_iter(match="{" + tag + "}*", count=1000))


def _staging(r: redis.Redis, tag: str) -> list[str]:
    return [k for k in _tagged(r, tag) if ":staging:" in k]


# -- the protocol ---------------------------------------------------------------------------

def test_commit_applies_each_op_exactly_once(redis_url, r, tag) -> None:
    sink = _sink(redis_url, tag)
    sink.validate(SCHEMA)
    rows = _rows(30)
    h = _prepare(sink, rows)
    assert r.get(f"{{{tag}}}:total") is None, "nothing is visible before commit"
    assert sink.commit(h) is CommitOutcome.COMMITTED
    t = "{" + tag + "}"
    assert r.get(f"{t}:total") == "30"
    want: dict[str, int] = {}
    for row in rows:
        want[row["category"]] = want.get(row["category"], 0) + row["qty"]
    assert {k: int(v) for k, v in r.hgetall(f"{t}:cat").items()} == want
    assert r.hgetall(f"{t}:row:7") == {"payload": "p7", "qty": "3"}
    entries = r.xrange(f"{t}:events")
    assert [e[1] for e in entries] == [{"id": str(i), "p": f"p{i}"} for i in range(30)]
    assert r.lrange(f"{t}:log", 0, -1) == [f"{i}:p{i}" for i in range(30)]
    assert r.zscore(f"{t}:top", "29") == 14.5 and r.zcard(f"{t}:top") == 30
    assert r.get(f"{t}:last:c0") == "p27" and 0 < r.ttl(f"{t}:last:c0") <= 3600
    assert _staging(r, tag) == [] and sink.list_prepared("s1") == []


def test_a_replayed_commit_changes_no_key_of_any_op_type(redis_url, r, tag) -> None:
    """Every op type of the mapping (the kit's harness uses three), byte for byte."""
    sink = _sink(redis_url, tag)
    h = _prepare(sink, _rows(10))
    assert sink.commit(h) is CommitOutcome.COMMITTED
    before = {k: r.dump(k) for k in _tagged(r, tag) if not k.endswith(":last:c0")}
    assert sink.commit(h) is CommitOutcome.ALREADY_COMMITTED
    back = loads_handle(dumps_handle(h))
    assert isinstance(back, RedisHandle)
    assert sink.recover_and_commit(back) is CommitOutcome.ALREADY_COMMITTED
    after = {k: r.dump(k) for k in _tagged(r, tag) if not k.endswith(":last:c0")}
    assert after == before
    assert r.get(f"{{{tag}}}:total") == "10" and r.xlen(f"{{{tag}}}:events") == 10


def test_purge_markers_trims_markers_below_the_batch(redis_url, r, tag) -> None:
    sink = _sink(redis_url, tag)
    handles = [_prepare(sink, _rows(1), batch=b) for b in range(5)]
    for h in handles:
        sink.commit(h)
    markers = sink.keys_for("s1").committed
    assert r.zcard(markers) == 5 and r.ttl(markers) == -1  # markers never expire
    assert sink.purge_markers("s1", 3) == 3
    assert sorted(int(s) for _, s in r.zrange(markers, 0, -1, withscores=True)) == [3, 4]
    assert sink.commit(handles[4]) is CommitOutcome.ALREADY_COMMITTED


def test_large_transaction_commits_in_chunks(redis_url, r, tag) -> None:
    t = "{{" + tag + "}}"
    ops: list[RedisOp] = [HSetOp(f"{t}:big", fields={"f{id}": "{payload}"}), RPushOp(f"{t}:list", "{id}"),
                          HIncrByOp(f"{t}:counts", "k{id}", 2), ZAddOp(f"{t}:z", "m{id}", "{id}")]
    sink = RedisSink(redis_url, ops, hash_tag=tag)
    n = 30_000
    batch = pa.RecordBatch.from_pydict({"id": list(range(n)), "payload": [f"v{i}" for i in range(n)]})
    txn = sink.begin_transaction(TransactionContext("s1", 0, 0, 1))
    sink.invoke_batch(txn, batch)
    h = sink.pre_commit(txn)
    staging = sink.keys_for("s1").staging(h.txn_id)
    raw = redis.Redis.from_url(redis_url)
    elements = raw.lrange(staging, 0, -1)
    raw.close()
    widths: dict[str, list[int]] = {}
    for element in elements:  # each a MessagePack array: cmd, [args], cmd, [args], ...
        packed = msgpack.unpackb(element)
        for cmd, args in zip(packed[::2], packed[1::2], strict=True):
            assert all(isinstance(a, str | bytes) for a in args), "the server gets every argument as text"
            widths.setdefault(cmd, []).append(len(args))
    assert len(elements) == h.staged and 1 < len(elements) < n // 10, "thousands of arguments per element"
    assert max(max(w) for w in widths.values()) <= MAX_ARGS
    assert len(widths["HSET"]) == 61 and len(widths["HINCRBY"]) == n  # 30k fields: 61 chunks of <= 999 args
    assert sink.commit(h) is CommitOutcome.COMMITTED
    assert r.hlen(f"{{{tag}}}:big") == n and r.hget(f"{{{tag}}}:big", "f29999") == "v29999"
    assert r.lrange(f"{{{tag}}}:list", 0, -1) == [str(i) for i in range(n)]
    assert r.hlen(f"{{{tag}}}:counts") == n and r.hget(f"{{{tag}}}:counts", "k123") == "2"
    assert r.zcard(f"{{{tag}}}:z") == n
    assert _staging(r, tag) == []


# -- bad input: a clear error, nothing applied ----------------------------------------------

def test_a_value_of_the_wrong_type_is_refused_before_staging(redis_url, r, tag) -> None:
    t = "{{" + tag + "}}"
    sink = RedisSink(redis_url, [IncrByOp(f"{t}:n", "{qty}")], hash_tag=tag)
    with pytest.raises(SchemaMismatchError, match="INCRBY needs an integer column"):
        sink.validate(pa.schema([("qty", pa.string())]))
    txn = sink.begin_transaction(TransactionContext("s1", 0, 0, 1))
    with pytest.raises(ConfigurationError, match=r"holds 'abc' \(str\); INCRBY needs an integer"):
        sink.invoke(txn, {"qty": "abc"})
    with pytest.raises(ConfigurationError, match="needs an integer"):
        sink.invoke(txn, {"qty": 2.5})
    with pytest.raises(ConfigurationError, match="is null"):
        sink.invoke(txn, {"qty": None})
    zsink = RedisSink(redis_url, [ZAddOp(f"{t}:z", "m", "{score}")], hash_tag=tag)
    with pytest.raises(SchemaMismatchError, match="ZADD needs a numeric column"):
        zsink.validate(pa.schema([("score", pa.string())]))
    ztxn = zsink.begin_transaction(TransactionContext("s1", 0, 0, 1))
    with pytest.raises(ConfigurationError, match="not a number"):
        zsink.invoke(ztxn, {"score": "high"})
    with pytest.raises(ConfigurationError, match="NaN"):
        zsink.invoke(ztxn, {"score": float("nan")})
    with pytest.raises(SchemaMismatchError, match="column 'nope'"):
        RedisSink(redis_url, [RPushOp(f"{t}:l", "{nope}")], hash_tag=tag).validate(SCHEMA)
    assert _tagged(r, tag) == []


def test_two_ops_on_one_key_in_a_transaction_are_refused(redis_url, tag) -> None:
    t = "{{" + tag + "}}"
    sink = RedisSink(redis_url, [HSetOp(f"{t}:u:{{id}}", columns=("payload",)),
                                 HIncrByOp(f"{t}:u:{{id}}", "visits", 1)], hash_tag=tag)
    txn = sink.begin_transaction(TransactionContext("s1", 0, 0, 1))
    with pytest.raises(ConfigurationError, match="give each op of the mapping its own keys"):
        sink.invoke(txn, {"id": 1, "payload": "x"})


def test_a_target_key_of_the_wrong_type_is_refused_at_pre_commit(redis_url, r, tag) -> None:
    sink = _sink(redis_url, tag)
    t = "{" + tag + "}"
    r.set(f"{t}:row:3", "i am a string")
    txn = sink.begin_transaction(TransactionContext("s1", 0, 0, 1))
    sink.invoke_batch(txn, _batch(_rows(10)))
    with pytest.raises(RedisTargetError) as err:
        sink.pre_commit(txn)
    assert err.value.key == f"{t}:row:3" and err.value.redis_type == "string" and err.value.op == "HSET"
    assert f"'{t}:row:3' is a Redis string, but HSET needs a hash" in str(err.value)
    sink.rollback(txn)  # what the Spark writer does after a failed pre_commit
    assert _tagged(r, tag) == [f"{t}:row:3"], "nothing applied, no staging left"


def test_a_target_key_of_the_wrong_type_at_commit_applies_nothing_and_keeps_staging(redis_url, r, tag) -> None:
    sink = _sink(redis_url, tag)
    t = "{" + tag + "}"
    h = _prepare(sink, _rows(10))
    r.rpush(f"{t}:events", "not a stream")  # someone writes the key between prepare and commit
    with pytest.raises(RedisTargetError, match=r"is a Redis list, but XADD needs a stream") as err:
        sink.commit(h)
    assert (err.value.key, err.value.redis_type, err.value.op) == (f"{t}:events", "list", "XADD")
    assert r.get(f"{t}:total") is None and not r.exists(f"{t}:cat"), "nothing was applied"
    assert len(_staging(r, tag)) == 1, "the staging is kept"
    r.delete(f"{t}:events")
    assert sink.commit(h) is CommitOutcome.COMMITTED
    assert r.get(f"{t}:total") == "10" and r.xlen(f"{t}:events") == 10


def test_a_counter_that_is_not_an_integer_is_refused(redis_url, r, tag) -> None:
    sink = _sink(redis_url, tag)
    t = "{" + tag + "}"
    h = _prepare(sink, _rows(6))
    r.hset(f"{t}:cat", "c1", "many")
    with pytest.raises(RedisTargetError, match=r"field 'c1' of hash .* does not hold an integer"):
        sink.commit(h)
    assert r.get(f"{t}:total") is None
    r.hset(f"{t}:cat", "c1", "-5")
    r.set(f"{t}:total", "007")  # Redis refuses leading zeros for INCRBY
    with pytest.raises(RedisTargetError, match="does not hold an integer"):
        sink.commit(h)
    r.set(f"{t}:total", "100")
    assert sink.commit(h) is CommitOutcome.COMMITTED
    assert r.get(f"{t}:total") == "106"


def test_key_slot_matches_redis_cluster() -> None:
    # values from the Redis cluster specification / CLUSTER KEYSLOT
    assert key_slot("foo") == 12182
    assert key_slot("somekey") == 11058
    assert key_slot("foo{hash_tag}") == key_slot("hash_tag") == 2515
    assert key_slot("{user1000}.following") == key_slot("{user1000}.followers")
    assert key_slot("foo{}{bar}") == key_slot(b"foo{}{bar}")  # empty tag: whole key hashed
    assert key_slot(b"{shop}:x") == key_slot("{shop}")


def test_cross_slot_keys_are_refused(redis_url, r, tag) -> None:
    sink = RedisSink(redis_url, [IncrByOp("counts:{category}", 1)], hash_tag=tag, require_same_slot=True)
    sink.validate(SCHEMA)  # per-row keys: checked as they are rendered
    sink.check_same_slot("{" + tag + "}:x", "s1")
    with pytest.raises(ConfigurationError, match="Put the hash tag into the key template"):
        sink.check_same_slot("counts:c1", "s1")
    txn = sink.begin_transaction(TransactionContext("s1", 0, 0, 1))
    with pytest.raises(ConfigurationError) as err:
        sink.invoke_batch(txn, _batch(_rows(3)))
    msg = str(err.value)
    assert "'counts:c0'" in msg and f"{{{tag}}}" in msg and "Put the hash tag into the key template" in msg
    fixed = RedisSink(redis_url, [IncrByOp("{{elsewhere}}:n", 1)], hash_tag=tag, require_same_slot=True)
    with pytest.raises(ConfigurationError, match=r"key template '{{elsewhere}}:n' hashes to cluster slot"):
        fixed.validate(SCHEMA)
    with pytest.raises(ConfigurationError, match="hashes to cluster slot"):
        fixed.begin_transaction(TransactionContext("s1", 0, 0, 1))
    # the same mapping on a standalone server with the default (auto) check is fine
    ok = RedisSink(redis_url, [IncrByOp("{{" + tag + "}}:n", 1), IncrByOp(tag + ":other:{category}", 1)],
                   hash_tag=tag)
    ok.commit(_prepare(ok, _rows(3)))
    assert r.get(f"{{{tag}}}:n") == "3"
    assert [k for k in _tagged(r, tag) if ":staging:" in k] == []


# -- server configuration ---------------------------------------------------------------------

@pytest.fixture
def own_redis() -> Iterator[LocalRedis]:
    server = LocalRedis(appendfsync="always").start()
    try:
        yield server
    finally:
        server.stop()


def test_weak_persistence_and_evicting_policies_are_refused(own_redis, caplog) -> None:
    c = redis.Redis.from_url(own_redis.url, decode_responses=True)
    sink = RedisSink(own_redis.url, [IncrByOp("{{x}}:n", 1)], hash_tag="x")
    sink.validate(SCHEMA)
    c.config_set("appendonly", "no")
    with pytest.raises(TargetConfigurationError, match=r"appendonly no.*appendonly yes.*appendfsync always"):
        sink.validate(SCHEMA)
    c.config_set("appendonly", "yes")
    c.config_set("appendfsync", "everysec")
    with pytest.raises(TargetConfigurationError, match=r"appendfsync everysec.*durability=everysec"):
        sink.validate(SCHEMA)
    weak = RedisSink(own_redis.url, [IncrByOp("{{x}}:n", 1)], hash_tag="x", durability="everysec")
    with caplog.at_level(logging.WARNING, logger="twopc.sinks.redis"):
        weak.validate(SCHEMA)
    assert "about 1 s" in caplog.text
    c.config_set("appendfsync", "always")
    c.config_set("maxmemory-policy", "allkeys-lru")
    with pytest.raises(TargetConfigurationError, match=r"allkeys-lru.*maxmemory-policy noeviction"):
        sink.validate(SCHEMA)
    c.config_set("maxmemory-policy", "volatile-lru")  # markers have no TTL: never evicted
    sink.validate(SCHEMA)
    c.close()


def test_disabled_config_needs_an_explicit_option_and_passwords_never_leak(own_redis) -> None:
    admin = redis.Redis.from_url(own_redis.url)
    secret = "s3cr3t-P@ss"
    admin.acl_setuser("app", enabled=True, passwords=[f"+{secret}"], keys=["*"], channels=["*"],
                      commands=["+@all", "-config"])
    url = f"redis://app:{secret.replace('@', '%40')}@127.0.0.1:{own_redis.port}/0"
    sink = RedisSink(url, [IncrByOp("{{x}}:n", 1)], hash_tag="x")
    assert secret not in sink.describe() and "%40" not in sink.describe()
    with pytest.raises(TargetConfigurationError, match="skipConfigCheck=true") as err:
        sink.validate(SCHEMA)
    assert secret not in str(err.value)
    trusted = RedisSink.from_options({"URL": url, "mapping": mapping_json([IncrByOp("{{x}}:n", 1)]),
                                      "hashtag": "x", "skipConfigCheck": "true"})
    trusted.validate(SCHEMA)
    h = _prepare(trusted, _rows(2))
    envelope = dumps_handle(h)
    assert secret not in envelope and "%40" not in envelope
    assert trusted.commit(h) is CommitOutcome.COMMITTED
    bad = RedisSink(f"redis://app:wrong-{secret}@127.0.0.1:{own_redis.port}/0", [IncrByOp("{{x}}:n", 1)],
                    hash_tag="x", skip_config_check=True)
    with pytest.raises(SinkUnavailableError) as err2:
        bad.validate(SCHEMA)
    assert secret not in str(err2.value) and "refused the login" in str(err2.value)
    admin.close()


def test_function_survives_a_restart_and_commit_still_works(own_redis) -> None:
    sink = RedisSink(own_redis.url, [IncrByOp("{{x}}:n", "{qty}")], hash_tag="x")
    sink.validate(SCHEMA)
    h = _prepare(sink, _rows(4))
    own_redis.kill()
    own_redis.restart()
    c = redis.Redis.from_url(own_redis.url, decode_responses=True)
    libs = c.function_list(library=LIBRARY_NAME)
    assert LIBRARY_NAME in str(libs), "the FUNCTION library was replayed from the AOF"
    assert sink.commit(h) is CommitOutcome.COMMITTED
    assert c.get("{x}:n") == str(sum(row["qty"] for row in _rows(4)))
    c.function_flush()  # gone anyway (e.g. FUNCTION FLUSH by an operator): reloaded on demand
    h2 = _prepare(sink, _rows(1))
    c.function_flush()
    assert sink.commit(h2) is CommitOutcome.COMMITTED
    c.close()


def test_eval_mode_reloads_scripts_after_noscript(own_redis) -> None:
    sink = RedisSink(own_redis.url, [RPushOp("{{x}}:l", "{id}")], hash_tag="x", script_mode="eval")
    sink.validate(SCHEMA)
    c = redis.Redis.from_url(own_redis.url, decode_responses=True)
    h = _prepare(sink, _rows(3))
    own_redis.kill()
    own_redis.restart()  # the script cache is empty now: NOSCRIPT, then reload
    assert sink.commit(h) is CommitOutcome.COMMITTED and sink.commit(h) is CommitOutcome.ALREADY_COMMITTED
    assert c.lrange("{x}:l", 0, -1) == ["0", "1", "2"]
    c.close()


def test_server_killed_between_pre_commit_and_commit_commits_exactly_once(own_redis, tmp_path) -> None:
    sink = RedisSink(own_redis.url, _all_ops("x"), hash_tag="x")
    sink.validate(SCHEMA)
    ledger = CommitLedger(str(tmp_path / "ck"))
    h0 = _prepare(sink, _rows(10), batch=0, partition=0)
    h1 = _prepare(sink, _rows(10, 10), batch=0, partition=1)
    own_redis.kill()  # SIGKILL: only what reached the AOF survives
    with pytest.raises(SinkUnavailableError):
        sink.commit(h0)
    own_redis.restart()
    assert {h.txn_id for h in sink.list_prepared("s1", 0)} == {h0.txn_id, h1.txn_id}
    coord = CommitCoordinator(sink, ledger, "s1")
    assert coord.commit_batch(0, [h0, h1]).committed == 2
    own_redis.kill()
    own_redis.restart()
    assert sink.commit(h0) is CommitOutcome.ALREADY_COMMITTED
    assert sink.commit(h1) is CommitOutcome.ALREADY_COMMITTED
    c = redis.Redis.from_url(own_redis.url, decode_responses=True)
    assert c.get("{x}:total") == "20" and c.xlen("{x}:events") == 20 and c.llen("{x}:log") == 20
    assert [k for k in c.scan_iter("{x}*") if ":staging:" in k] == []
    c.close()


# -- options, mapping, handles ------------------------------------------------------------------

def test_mapping_json_round_trip_and_errors(redis_url) -> None:
    ops = _all_ops("shop")
    assert parse_mapping(mapping_json(ops)) == ops
    text = json.dumps([{"op": "incrby", "key": "{{shop}}:n", "by": "{qty}"},
                       {"op": "HSET", "key": "{{shop}}:row:{id}"}])
    parsed = parse_mapping(text)
    assert parsed == [IncrByOp("{{shop}}:n", "{qty}"), HSetOp("{{shop}}:row:{id}")]
    for bad, msg in [("not json", "not valid JSON"), ("[]", "non-empty"), ('[{"op": "DEL", "key": "k"}]', "unknown op"),
                     ('[{"op": "SET", "key": "k"}]', "needs"), ('[{"op": "SET", "key": "k", "value": "v", "x": 1}]',
                                                                "unknown parameter")]:
        with pytest.raises(ConfigurationError, match=msg):
            parse_mapping(bad)
    bad_ops: list[tuple[list[Any], str]] = [
        ([IncrByOp("k", "qty")], "exactly one column"),
        ([IncrByOp("k", 1.5)], "an integer"),  # type: ignore[arg-type]  # the wrong type is what is tested
        ([RPushOp("k:{a.b}", "{x}")], "plain column"),
        ([RPushOp("k:{", "v")], "not a valid template"),
        ([SetOp("k", "v", ttl=0)], "ttl must be"),
    ]
    for ops_bad, msg in bad_ops:
        with pytest.raises(ConfigurationError, match=msg):
            RedisSink(redis_url, ops_bad)
    with pytest.raises(MissingOptionError, match="mapping"):
        RedisSink.from_options({"url": redis_url})
    with pytest.raises(ConfigurationError, match="redis://"):
        RedisSink("postgresql://x/y", ops)
    with pytest.raises(ConfigurationError, match="hashTag"):
        RedisSink(redis_url, ops, hash_tag="{a{b}")


def test_options_are_read_by_one_reader_and_unknown_ones_refused(redis_url, tag) -> None:
    mapping = mapping_json([IncrByOp(f"{{{{{tag}}}}}:n", 1)])
    base = {"url": redis_url, "mapping": mapping, "hashTag": tag}
    with pytest.raises(ConfigurationError) as err:
        RedisSink.from_options({**base, "socketTimout": "5s", "hashtagg": "x"})
    msg = str(err.value)
    assert msg.startswith("twopc-redis does not know option(s) hashtagg, socketTimout (hashtagg: did you mean "
                          "'hashTag'?; socketTimout: did you mean 'socketTimeout'?)")
    assert ("Supported: url, password, mapping, hashTag, requireSameSlot, durability, skipConfigCheck, scriptMode, "
            "socketTimeout, connectTimeout") in msg
    # the runtime's options and the ones Spark adds by itself are not the sink's, but accepted
    RedisSink.from_options({**base, "checkpointLocation": "/ck", "txnVersion": "3", "sinkId": "s",
                            "txnAppId": "a", "minBatchesToRetain": "5", "path": "/p", "queryname": "q"})
    for given, seconds in (("500ms", 0.5), ("30s", 30.0), ("2min", 120.0), ("2", 2.0), ("0.25", 0.25)):
        sink = RedisSink.from_options({**base, "SOCKETTIMEOUT": given, "connectTimeout": given})
        assert sink._server.config.socket_timeout == sink._server.config.connect_timeout == seconds
    defaults = RedisSink.from_options(base)._server.config
    assert (defaults.socket_timeout, defaults.connect_timeout) == (60.0, 10.0)
    for bad, match in (("0", "socketTimeout must be > 0"), ("soon", "socketTimeout must be a duration"),
                       ("-1s", "socketTimeout must be a duration")):
        with pytest.raises(ConfigurationError, match=match):
            RedisSink.from_options({**base, "socketTimeout": bad})
    api = RedisSink(redis_url, mapping, socket_timeout=Duration(1500), connect_timeout=3)
    assert (api._server.config.socket_timeout, api._server.config.connect_timeout) == (1.5, 3.0)
    assert RedisSink.from_options({**base, "requireSameSlot": "yes"})._same_slot is True
    for name, value, match in (("requireSameSlot", "maybe", "auto, true or false"),
                               ("durability", "never", "always or everysec"),
                               ("scriptMode", "lua", "auto, function or eval"),
                               ("skipConfigCheck", "perhaps", "true or false")):
        with pytest.raises(ConfigurationError, match=match):
            RedisSink.from_options({**base, name: value})


def test_option_errors_never_show_the_password(redis_url) -> None:
    mapping = mapping_json([IncrByOp("{{x}}:n", 1)])
    secret = "Pa55-w0rd"
    for options in ({"url": f"redis://app:{secret}@127.0.0.1:6379/0", "mapping": mapping, "durability": secret},
                    {"url": f"redis://127.0.0.1:6379/0?password={secret}", "mapping": mapping, "scriptMode": secret},
                    {"url": redis_url, "password": secret, "mapping": mapping, "socketTimeout": secret},
                    {"url": f"redis://app:{secret}@127.0.0.1:6379/0", "mapping": mapping, secret: "x"}):
        with pytest.raises(ConfigurationError) as err:
            RedisSink.from_options(options)
        assert secret not in str(err.value) and "***" in str(err.value)
        assert secret not in repr(RedisSink.from_options({k: v for k, v in options.items()
                                                          if k in ("url", "password", "mapping")}))


def test_from_options_reads_the_options_case_insensitively(redis_url, r, tag) -> None:
    sink = RedisSink.from_options({"url": redis_url, "MAPPING": mapping_json(_all_ops(tag)), "hashTag": f"{{{tag}}}",
                                   "durability": "always", "requireSameSlot": "true"})
    assert sink.hash_tag("s1") == f"{{{tag}}}" and sink.ops == _all_ops(tag)
    assert sink.commit(_prepare(sink, _rows(2))) is CommitOutcome.COMMITTED
    assert r.get(f"{{{tag}}}:total") == "2"
    assert RedisDataSource.name() == "twopc-redis" and RedisDataSource.sink_class is RedisSink


def test_spark_batch_write_is_exactly_once(spark, redis_url, r, tag, tmp_path) -> None:
    import twopc

    twopc.register(spark, RedisDataSource)
    df = spark.createDataFrame(_rows(40), schema="id long, category string, qty long, payload string, score double")
    t = "{{" + tag + "}}"
    mapping = mapping_json([IncrByOp(f"{t}:total", 1), HSetOp(f"{t}:row:{{id}}", columns=("payload",)),
                            XAddOp(f"{t}:events", columns=("id",))])

    def write() -> None:
        (df.repartition(3).write.format("twopc-redis").mode("append")
           .option("url", redis_url).option("mapping", mapping).option("hashTag", tag)
           .option("checkpointLocation", str(tmp_path / "ck")).option("txnVersion", "1").save())

    write()
    write()  # same txnVersion: writes nothing
    assert r.get(f"{{{tag}}}:total") == "40" and r.xlen(f"{{{tag}}}:events") == 40
    assert r.hget(f"{{{tag}}}:row:39", "payload") == "p39"
    assert _staging(r, tag) == []
