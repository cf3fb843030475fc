"""The Redis sink commits a decided batch in one server-side call, against a real redis-server:
a reader never sees part of a batch, a check failing in one transaction applies nothing of the
batch, and the batch is chunked only when it must be (more than MAX_BATCH_TXNS transactions,
or transactions under several hash tags).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pyarrow as pa
import pytest
import redis

from twopc import CommitCoordinator, CommitLedger, CommitOutcome, CommitShape, TransactionContext
from twopc.sinks.redis import IncrByOp, RedisHandle, RedisSink, RedisTargetError, XAddOp
from twopc.sinks.redis import _lua as lua

SCHEMA = pa.schema([("id", pa.int64())])
ROWS = 5  # rows per transaction

#: A reader that sees the batch counter and the markers at one instant (a script runs alone).
SNAPSHOT = "return {redis.call('GET', KEYS[1]) or '0', redis.call('ZCARD', KEYS[2])}"


@pytest.fixture
def tag() -> str:
    """A fresh hash tag per test (``r`` is the shared client of tests/fix_redis.py: bytes replies)."""
    return "b" + uuid.uuid4().hex[:10]


def _sink(url: str, tag: str) -> RedisSink:
    t = "{{" + tag + "}}"
    sink = RedisSink(url, [IncrByOp(f"{t}:total", 1), XAddOp(f"{t}:events", fields={"id": "{id}"})], hash_tag=tag)
    sink.validate(SCHEMA)
    return sink


def _prepare(sink: RedisSink, batch: int, partition: int, sink_id: str = "s1") -> RedisHandle:
    txn = sink.begin_transaction(TransactionContext(sink_id, batch, partition, 1))
    first = (batch * 100 + partition) * ROWS
    sink.invoke_batch(txn, pa.RecordBatch.from_pylist([{"id": i} for i in range(first, first + ROWS)],
                                                       schema=SCHEMA))
    return sink.pre_commit(txn)


def _fcalls(r: redis.Redis) -> int:
    stats: dict[str, Any] = r.info("commandstats")
    return int(stats.get("cmdstat_fcall", {}).get("calls", 0))


def test_a_decided_batch_is_one_server_call(redis_url, r, tag, tmp_path) -> None:
    sink = _sink(redis_url, tag)
    handles = [_prepare(sink, 0, p) for p in range(4)]
    before = _fcalls(r)
    result = CommitCoordinator(sink, CommitLedger(str(tmp_path / "ck")), "s1").commit_batch(0, handles)
    assert result.committed == 4
    assert _fcalls(r) - before == 1, "four transactions of one batch were committed by one FCALL"
    assert r.get("{" + tag + "}:total") == str(4 * ROWS).encode()
    assert sink.commit_all(handles) == [CommitOutcome.ALREADY_COMMITTED] * 4


def test_a_reader_never_sees_part_of_a_batch(redis_url, r, tag, tmp_path) -> None:
    sink = _sink(redis_url, tag)
    keys = sink.keys_for("s1")
    coord = CommitCoordinator(sink, CommitLedger(str(tmp_path / "ck")), "s1")
    parts, batches = 4, 12
    seen: list[tuple[int, int]] = []
    done = threading.Event()
    reader = redis.Redis.from_url(redis_url)
    snapshot = reader.register_script(SNAPSHOT)

    def read() -> None:
        while not done.is_set():
            total, markers = snapshot(keys=["{" + tag + "}:total", keys.committed])
            seen.append((int(total), int(markers)))

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for b in range(batches):
            coord.commit_batch(b, [_prepare(sink, b, p) for p in range(parts)])
    finally:
        done.set()
        thread.join()
        reader.close()
    partial = [(t, m) for t, m in seen if m % parts or t != m * ROWS]
    assert not partial, f"a reader saw part of a batch (counter, markers): {partial[:5]}"
    assert len({m for _t, m in seen}) > 1, "the reader ran while batches committed"


def test_a_failing_check_in_one_transaction_applies_nothing_of_the_batch(redis_url, r, tag, tmp_path) -> None:
    sink = _sink(redis_url, tag)
    t = "{" + tag + "}"
    handles = [_prepare(sink, 0, p) for p in range(3)]
    r.set(f"{t}:events", "not a stream")
    with pytest.raises(RedisTargetError, match=r"is a Redis string, but XADD needs a stream") as err:
        sink.commit_all(handles)
    assert handles[0].txn_id in str(err.value)
    assert r.get(f"{t}:total") is None, "no transaction of the batch was applied"
    assert len(sink.list_prepared("s1", 0)) == 3, "every staging is kept"
    r.delete(f"{t}:events")
    assert sink.commit_all(handles) == [CommitOutcome.COMMITTED] * 3
    assert r.get(f"{t}:total") == str(3 * ROWS).encode() and r.xlen(f"{t}:events") == 3 * ROWS


def test_a_lost_transaction_is_reported_and_the_others_commit(redis_url, r, tag) -> None:
    sink = _sink(redis_url, tag)
    handles = [_prepare(sink, 0, p) for p in range(3)]
    sink.abort(handles[1])  # rolled back by hand: neither prepared nor committed
    assert sink.commit_all(handles) == [CommitOutcome.COMMITTED, CommitOutcome.LOST, CommitOutcome.COMMITTED]
    assert r.get("{" + tag + "}:total") == str(2 * ROWS).encode()


def test_a_batch_is_chunked_only_beyond_the_limit_or_across_hash_tags(redis_url, r, tag, monkeypatch) -> None:
    sink = _sink(redis_url, tag)
    handles = [_prepare(sink, 0, p) for p in range(5)]
    assert sink.commit_shape(handles) is CommitShape.ONE_CALL
    monkeypatch.setattr(lua, "MAX_BATCH_TXNS", 2)
    assert sink.commit_shape(handles) is CommitShape.WHOLE_BATCH
    before = _fcalls(r)
    assert sink.commit_all(handles) == [CommitOutcome.COMMITTED] * 5
    assert _fcalls(r) - before == 3, "5 transactions at 2 per call"
    other = _sink(redis_url, tag + "x")
    mixed = [_prepare(sink, 1, 0), _prepare(other, 1, 1)]
    assert sink.commit_shape(mixed) is CommitShape.WHOLE_BATCH
    before = _fcalls(r)
    assert sink.commit_all(mixed) == [CommitOutcome.COMMITTED] * 2
    assert _fcalls(r) - before == 2, "one call per hash tag"


def test_a_transaction_committed_by_the_v1_function_answers_already_committed(redis_url, r, tag) -> None:
    sink = _sink(redis_url, tag)
    old, new = _prepare(sink, 0, 0), _prepare(sink, 0, 1)
    assert sink.commit(old) is CommitOutcome.COMMITTED  # what a process of the previous version does
    assert r.function_list(library=lua.LIBRARY_NAME) and r.function_list(library=lua.BATCH_LIBRARY_NAME)
    assert sink.commit_all([old, new]) == [CommitOutcome.ALREADY_COMMITTED, CommitOutcome.COMMITTED]
    assert r.get("{" + tag + "}:total") == str(2 * ROWS).encode()


def test_a_batch_commits_in_one_evalsha_on_servers_without_functions(redis_url, r, tag) -> None:
    t = "{{" + tag + "}}"
    sink = RedisSink(redis_url, [IncrByOp(f"{t}:total", 1)], hash_tag=tag, script_mode="eval")
    sink.validate(SCHEMA)
    handles = [_prepare(sink, 0, p) for p in range(3)]
    before = int(r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    assert sink.commit_all(handles) == [CommitOutcome.COMMITTED] * 3
    assert int(r.info("commandstats")["cmdstat_evalsha"]["calls"]) - before == 1
    assert sink.commit_all(handles) == [CommitOutcome.ALREADY_COMMITTED] * 3
    assert r.get("{" + tag + "}:total") == str(3 * ROWS).encode()
