"""What a server keeps across an upgrade of the Redis sink, against a real redis-server.

Versions before 0.2 named transactions ``{sink}~{batch}~{partition}~{attempt}~{nonce}``;
this one writes twopc's canonical ``twopc:{sink}:{batch}:{partition}:{attempt}:{nonce}``.
Transactions and markers of the old form must still list, commit, abort, answer
ALREADY_COMMITTED and be recovered. The old state is written here by hand, key by key, as
the old version wrote it (the keys did not change; its staging list is in the text format of
``twopc_redis_v1``, one argument per element, which the library still reads), never through
the sink. The FUNCTION library loaded under ``twopc_redis_v2`` must not change either: its code
is pinned.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
import redis

from twopc import CommitLedger, CommitOutcome, RecoveryCoordinator, TransactionContext, Xid
from twopc.sinks.redis import HSetOp, IncrByOp, RedisHandle, RedisSink
from twopc.spi import ProtocolError
from twopc.spi.operations import Decision
from twopc.spi.runtime import loads_handle

LIBRARY_NAME = "twopc_redis_v2"
#: SHA-256 of the library code every version loads under LIBRARY_NAME. A change of the
#: server-side code needs a new library name (twopc_redis_v3), never a new digest here:
#: FUNCTION LOAD REPLACE from two versions during an upgrade would swap each other's code.
LIBRARY_SHA256 = "7ad0fcfd43ccbe6d95b94854ba26d657eee864c9c694856629b627883aa68c5d"

SCHEMA = pa.schema([("id", pa.int64()), ("qty", pa.int64()), ("payload", pa.string())])


@pytest.fixture
def tag() -> str:
    return "u" + uuid.uuid4().hex[:10]


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def _sink(url: str, tag: str) -> RedisSink:
    t = "{{" + tag + "}}"
    return RedisSink(url, [IncrByOp(f"{t}:total", "{qty}"), HSetOp(f"{t}:row:{{id}}", columns=("payload",))],
                     hash_tag=tag)


def _old_staging(t: str, row_id: int, qty: int, payload: str) -> list[str]:
    """The staging list the old version pushed for one row of :func:`_sink`'s mapping:
    type checks, counter checks, then the writes; each group ``"<CMD> <n>"`` + n args."""
    return ["?T 3", "string", "INCRBY", f"{t}:total",
            "?T 3", "hash", "HSET", f"{t}:row:{row_id}",
            "?I 2", "INCRBY", f"{t}:total",
            "INCRBY 2", f"{t}:total", str(qty),
            "HSET 3", f"{t}:row:{row_id}", "payload", payload]


def _old_handle(txn_id: str, tag: str, staged: int) -> RedisHandle:
    """The handle as the old version's ledger holds it (its JSON envelope, by hand)."""
    sink_id, batch, partition, attempt, _ = txn_id.split("~")
    payload = {"attempt_id": int(attempt), "batch_id": int(batch), "hash_tag": "{" + tag + "}",
               "partition_id": int(partition), "sink_id": sink_id, "staged": staged, "txn_id": txn_id}
    handle = loads_handle(json.dumps({"kind": "twopc.redis", "payload": payload, "version": 1}))
    assert isinstance(handle, RedisHandle)
    return handle


def test_transactions_and_markers_with_old_ids_commit_abort_and_recover(redis_url, r, tag, tmp_path) -> None:
    t = "{" + tag + "}"
    p = f"{t}:s1:"
    # the old version's state, written by hand: one committed transaction (marker and
    # effects), two prepared ones of batch 1 (one decided, one an orphan) and one that
    # died while staging (registered, half its staging pushed, never prepared)
    committed = "s1~0~0~5~0a1b2c3d"
    r.zadd(p + "committed", {committed: 0})
    r.set(f"{t}:total", "10")
    r.hset(f"{t}:row:1", "payload", "from batch 0")
    decided, orphan, half = "s1~1~0~7~deadbeef", "s1~1~1~8~cafebabe", "s1~2~0~9~12345678"
    for txn_id, batch, row_id, qty in ((decided, 1, 100, 3), (orphan, 1, 101, 5)):
        staging = _old_staging(t, row_id, qty, f"old-{row_id}")
        r.zadd(p + "txns", {txn_id: batch})
        r.rpush(p + "staging:" + txn_id, *staging)
        r.hset(p + "prepared", txn_id, str(len(staging)))
    r.zadd(p + "txns", {half: 2})
    r.rpush(p + "staging:" + half, *_old_staging(t, 102, 7, "old-102")[:9])

    sink = _sink(redis_url, tag)
    sink.validate(SCHEMA)
    new = sink.pre_commit(_txn(sink, batch=1, partition=2, rows=[{"id": 200, "qty": 4, "payload": "new-200"}]))
    assert re.fullmatch(r"twopc:s1:1:2:1:[0-9a-f]{8}", new.txn_id), "new transactions get the canonical id"

    # listing: both forms, ids exactly as registered, fields parsed from the old ids
    listed = sink.list_prepared("s1")
    assert [h.txn_id for h in listed] == [decided, orphan, new.txn_id, half]
    assert [(h.batch_id, h.partition_id, h.attempt_id) for h in listed] == [(1, 0, 7), (1, 1, 8), (1, 2, 1),
                                                                              (2, 0, 9)]
    assert [h.txn_id for h in sink.list_prepared("s1", 2)] == [half]

    # markers of old ids: ALREADY_COMMITTED, refused abort
    old_committed = _old_handle(committed, tag, -1)
    assert sink.is_committed(old_committed)
    assert sink.commit(old_committed) is CommitOutcome.ALREADY_COMMITTED
    with pytest.raises(ProtocolError, match="already committed"):
        sink.abort(old_committed)

    # recovery after the upgrade: the old driver had decided batch 1 = {decided, new}
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_sink_id("s1", default="s1")
    ledger.record_decision(Decision("s1", 1, (_old_handle(decided, tag, 18), new)))
    recovery = RecoveryCoordinator(sink, ledger)
    plan = recovery.plan()
    assert set(plan.transactions_to_commit) == {decided, new.txn_id}, "an old id still matches its decision"
    assert set(plan.orphans_to_roll_back) == {orphan, half}
    report = recovery.run()
    assert report.finished_batches == [1] and report.committed == 2 and set(report.rolled_back) == {orphan, half}

    assert r.get(f"{t}:total") == str(10 + 3 + 4), "the decided old and new transactions, once; no orphan"
    assert r.hget(f"{t}:row:100", "payload") == "old-100" and r.hget(f"{t}:row:200", "payload") == "new-200"
    assert not r.exists(f"{t}:row:101") and not r.exists(f"{t}:row:102")
    assert r.zcard(p + "txns") == 0 and r.hlen(p + "prepared") == 0
    assert [k for k in r.scan_iter(match=t + "*", count=1000) if ":staging:" in k] == []
    assert r.zscore(p + "committed", decided) == 1.0, "the marker keeps the id as registered"
    assert sink.commit(_old_handle(decided, tag, 18)) is CommitOutcome.ALREADY_COMMITTED
    assert sink.commit(new) is CommitOutcome.ALREADY_COMMITTED
    assert sink.commit(_old_handle(orphan, tag, 18)) is CommitOutcome.LOST
    assert sink.purge_markers("s1", 1) == 1 and not sink.is_committed(old_committed)


def _txn(sink: RedisSink, *, batch: int, partition: int, rows: list[dict[str, Any]]) -> Any:
    txn = sink.begin_transaction(TransactionContext("s1", batch, partition, 1))
    sink.invoke_batch(txn, pa.RecordBatch.from_pylist(rows, schema=SCHEMA))
    return txn


def test_malformed_handles_are_refused_before_they_reach_redis(redis_url, r, tag) -> None:
    sink = _sink(redis_url, tag)
    sink.validate(SCHEMA)
    good = "twopc:s1:4:0:9:deadbeef"
    bad = [
        RedisHandle("s1~4~0~9~deadbeef\r\nFLUSHALL", "s1", 4, 0, 9),  # not an id
        RedisHandle("twopc:s1:4:0:9:DEADBEEF", "s1", 4, 0, 9),  # nonce must be lower-case hex
        RedisHandle("s1:4:0:9:deadbeef", "s1", 4, 0, 9),  # neither form
        RedisHandle(good, "s2", 4, 0, 9),  # another sink's id
        RedisHandle(good, "s1", 5, 0, 9),  # another batch: its marker would be scored wrong
        RedisHandle(good, "s1", 4, 0, 9, hash_tag="{a}{b}"),  # not a hash tag
        RedisHandle(good, "s1", 4, 0, 9, hash_tag=tag),  # a tag without braces
    ]
    calls = r.info("stats")["total_commands_processed"]
    for handle in bad:
        for action in (sink.commit, sink.abort, sink.is_committed):
            with pytest.raises(ProtocolError):
                action(handle)
    assert r.info("stats")["total_commands_processed"] == calls + 1, "only our own INFO reached the server"
    assert sink.commit(RedisHandle(good, "s1", 4, 0, 9, hash_tag="{" + tag + "}")) is CommitOutcome.LOST
    assert Xid.parse(good) == Xid("s1", 4, 0, 9, "deadbeef") == Xid.parse("s1~4~0~9~deadbeef")


def test_list_prepared_skips_ids_it_cannot_read(redis_url, r, tag, caplog) -> None:
    sink = _sink(redis_url, tag)
    keys = sink.keys_for("s1")
    r.zadd(keys.txns, {"garbage": 0, "twopc:other:0:0:1:0a0a0a0a": 0, "s1~0~0~1~0a0a0a0a": 0})
    assert [h.txn_id for h in sink.list_prepared("s1")] == ["s1~0~0~1~0a0a0a0a"]
    assert "'garbage'" in caplog.text and "twopc:other:" in caplog.text


def test_the_library_loaded_under_its_name_never_changes(redis_url, r, tag) -> None:
    _sink(redis_url, tag).validate(SCHEMA)  # loads the library
    (lib,) = r.function_list(library=LIBRARY_NAME, withcode=True)
    fields = dict(zip(lib[::2], lib[1::2], strict=True)) if isinstance(lib, list) else lib
    code = fields["library_code"]
    assert hashlib.sha256(code.encode()).hexdigest() == LIBRARY_SHA256, (
        f"the code of {LIBRARY_NAME} changed: give the changed library a new name (twopc_redis_v3), so a "
        f"server never runs two versions' code under one name")
