"""Acknowledging in the sink's commit: with option ``ackGroup`` the Redis sink's commit of a batch also acknowledges the
source entries its rows came from, in the same atomic server-side call (real Redis)."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from twopc import CommitCoordinator, CommitLedger, ConfigurationError, TransactionContext, faultinject
from twopc.sinks.redis import IncrByOp, RedisSink, RPushOp
from twopc.sinks.redis import _lua as lua
from twopc.sinks.redis._acks import AckSpec
from twopc.sinks.redis._lua import ACK_LIBRARY_NAME, ack_library_code
from twopc.spi import SchemaMismatchError

SCHEMA = pa.schema([("stream", pa.string()), ("id", pa.string()), ("n", pa.int64())])
PINNED = "79f26eaea639eb3a"


def test_the_ack_library_code_is_pinned() -> None:
    """The code under ``twopc_redis_ack_v2`` never changes; a change takes a new name."""
    assert ACK_LIBRARY_NAME == "twopc_redis_ack_v2"
    assert hashlib.sha256(ack_library_code().encode()).hexdigest()[:16] == PINNED



class Pipeline:
    """Two streams read by group ``g`` (some entries delivered to another consumer and
    pending), and a sink that counts rows and logs them, acknowledging in its commit."""

    def __init__(self, redis_url: str, r: Any, tmp_path: Path) -> None:
        self.r, self.tag = r, f"k{uuid.uuid4().hex[:8]}"
        self.a, self.b = f"{{{self.tag}}}:a", f"{{{self.tag}}}:b"
        for i in range(1, 9):
            r.xadd(self.a if i % 2 else self.b, {"n": str(i)}, id=f"1000-{i}")
        for s in (self.a, self.b):
            r.xgroup_create(s, "g", id="0")
        r.xreadgroup("g", "someone-else", {self.a: ">", self.b: ">"})  # every entry pending
        self.sink = RedisSink(redis_url, [IncrByOp("{{" + self.tag + "}}:rows", 1),
                                          RPushOp("{{" + self.tag + "}}:log", "{n}")],
                              hash_tag=self.tag, ack=AckSpec("g"))
        self.sink.validate(SCHEMA)
        self.sid = f"s{uuid.uuid4().hex[:8]}"
        self.ledger = CommitLedger(str(tmp_path / "ck"))
        self.ledger.claim()
        self.coordinator = CommitCoordinator(self.sink, self.ledger, self.sid)

    def prepare(self, batch: int, parts: list[list[tuple[str, str, int]]]) -> list[Any]:
        handles = []
        for p, rows in enumerate(parts):
            txn = self.sink.begin_transaction(TransactionContext(self.sid, batch, p, 1))
            self.sink.invoke_batch(txn, pa.RecordBatch.from_pylist(
                [{"stream": s, "id": i, "n": n} for s, i, n in rows], schema=SCHEMA))
            handles.append(self.sink.pre_commit(txn))
        return handles

    def group(self, stream: str) -> tuple[str, int]:
        """(last-delivered-id, entries still pending) of group ``g``."""
        g = self.r.xinfo_groups(stream)[0]
        return g["last-delivered-id"].decode(), g["pending"]


@pytest.fixture
def pipe(redis_url: str, r: Any, tmp_path: Path) -> Pipeline:
    return Pipeline(redis_url, r, tmp_path)


def test_the_commit_acknowledges_up_to_the_batchs_highest_id_per_stream_in_the_same_call(pipe: Pipeline) -> None:
    a, b = pipe.a, pipe.b
    # two tasks, rows repartitioned across them: a task's highest id is not the batch's
    handles = pipe.prepare(0, [[(a, "1000-1", 1), (b, "1000-4", 4)], [(a, "1000-3", 3), (b, "1000-2", 2)]])
    assert [h.acks for h in handles] == [((a, "1000-1"), (b, "1000-4")), ((a, "1000-3"), (b, "1000-2"))]
    assert pipe.group(a) == ("1000-7", 4) and pipe.group(b) == ("1000-8", 4)  # nothing acknowledged at prepare
    assert pipe.coordinator.commit_batch(0, handles).action == "committed"
    assert int(pipe.r.get(f"{{{pipe.tag}}}:rows")) == 4
    # entries at or below the batch's highest id are acknowledged, later ones stay pending
    assert [e["message_id"].decode() for e in pipe.r.xpending_range(a, "g", "-", "+", 100)] == ["1000-5", "1000-7"]
    assert [e["message_id"].decode() for e in pipe.r.xpending_range(b, "g", "-", "+", 100)] == ["1000-6", "1000-8"]
    # replaying the commit (a retry, recovery) changes nothing
    assert pipe.sink.commit_all(handles, recovering=True) and int(pipe.r.get(f"{{{pipe.tag}}}:rows")) == 4
    assert pipe.group(a)[1] == 2 and pipe.group(b)[1] == 2


def test_a_split_batch_acknowledges_only_in_its_last_call(pipe: Pipeline, monkeypatch: Any, tmp_path: Path) -> None:
    a = pipe.a
    monkeypatch.setattr(lua, "MAX_BATCH_TXNS", 1)  # one transaction per call: two calls
    handles = pipe.prepare(0, [[(a, "1000-5", 5)], [(a, "1000-1", 1)]])
    with faultinject.armed("between_commits@batch=0:raise", tmp_path / "faults"), \
            pytest.raises(faultinject.InjectedFault):
        pipe.coordinator.commit_batch(0, handles)
    assert pipe.r.lrange(f"{{{pipe.tag}}}:log", 0, -1) == [b"5"]  # the first call committed
    assert pipe.group(a)[1] == 4  # but acknowledged nothing: 1000-1 was not committed yet
    assert pipe.coordinator.commit_batch(0, handles).action == "finished"  # as the next start would
    assert sorted(pipe.r.lrange(f"{{{pipe.tag}}}:log", 0, -1)) == [b"1", b"5"]
    assert [e["message_id"].decode() for e in pipe.r.xpending_range(a, "g", "-", "+", 100)] == ["1000-7"]


def test_ack_options_are_checked_before_any_task(redis_url: str) -> None:
    base = {"url": redis_url, "mapping": '[{"op": "INCRBY", "key": "{{x}}:n", "by": 1}]', "hashTag": "x"}
    with pytest.raises(ConfigurationError, match="set ackGroup"):
        RedisSink.from_options({**base, "ackIdColumn": "entry"})
    sink = RedisSink.from_options({**base, "ackGroup": "g", "ackIdColumn": "entry"})
    with pytest.raises(SchemaMismatchError, match=r"column 'entry' \(ackIdColumn\)"):
        sink.validate(SCHEMA)
    RedisSink.from_options({**base, "ackGroup": "g"}).validate(SCHEMA)


def test_an_ack_group_that_is_not_a_group_of_the_stream_is_refused_before_anything_is_staged(
        redis_url: str, r: Any, tmp_path: Path) -> None:
    """A typo in ackGroup must not create a second group: the source's group would then move
    only after Spark's commit, and nothing would say that the one-call acknowledgement is off."""
    pipe = Pipeline(redis_url, r, tmp_path)
    sink = RedisSink(redis_url, [IncrByOp("{{" + pipe.tag + "}}:rows", 1)], hash_tag=pipe.tag, ack=AckSpec("gg"))
    txn = sink.begin_transaction(TransactionContext(pipe.sid, 0, 0, 1))
    sink.invoke_batch(txn, pa.RecordBatch.from_pylist([{"stream": pipe.a, "id": "1000-1", "n": 1}], schema=SCHEMA))
    with pytest.raises(ConfigurationError, match=rf"ackGroup 'gg' is not a consumer group of stream '{{{pipe.tag}}}:a' "
                                                 r"on .* \(its groups: 'g'\).*Set ackGroup to the source's group"):
        sink.pre_commit(txn)
    assert [g["name"] for g in r.xinfo_groups(pipe.a)] == [b"g"]
    # nothing registered or staged (the owner record is the pipeline's coordinator's claim of its sink id)
    assert r.keys(f"{{{pipe.tag}}}:{pipe.sid}:*") == [f"{{{pipe.tag}}}:{pipe.sid}:owner".encode()]


def test_a_version_1_redis_handle_reads_as_one_without_acks_and_acks_survive_the_envelope() -> None:
    from twopc.sinks.redis import RedisHandle
    from twopc.spi.runtime import decode_handle, encode_handle

    payload: dict[str, Any] = {"txn_id": "twopc:s:0:0:1:ab", "sink_id": "s", "batch_id": 0, "partition_id": 0,
                               "attempt_id": 1, "hash_tag": "{x}", "staged": 3}
    old = decode_handle({"kind": "twopc.redis", "version": 1, "payload": payload})
    assert isinstance(old, RedisHandle) and old.acks == ()
    new = RedisHandle(**payload, acks=(("{x}:a", "1000-3"),))
    stored = json.loads(json.dumps(encode_handle(new)))  # as the ledger keeps it: tuples become lists
    assert stored["version"] == 2 and decode_handle(stored) == new
