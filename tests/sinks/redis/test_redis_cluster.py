"""The Redis sink and the Redis Stream source on a live Redis Cluster
(:class:`twopc.faultinject.LocalRedisCluster`: three masters and three replicas on loopback),
with the cluster's own faults between ``pre_commit`` and ``commit``:

- a slot moved to another master (the committing client's slot map is stale: MOVED);
- a slot half-migrated (IMPORTING/MIGRATING): a commit whose keys all moved is served by
  the importing node (ASK), one whose target key moved but whose staging did not is
  refused before its first write, and finished once the migration ends;
- a coordinated failover (``CLUSTER FAILOVER``), and a master SIGKILLed and replaced by its
  replica (automatic failover) after the prepared staging reached the replica;
- asynchronous replication's loss window, held open (the replica is cut off its master,
  then takes over): a lost prepared staging makes the decided commit fail with
  :class:`TransactionLostError` (never silent), and a lost commit (writes and marker) is
  applied again by recovery from the ledger's decision.

Each check counts rows with an INCRBY counter next to the per-id hashes, so a commit
applied twice shows. The cluster is shared by the module; every test uses its own hash
tag and finds its slot's master when it needs it.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType, TimestampType
from redis.cluster import RedisCluster

from twopc import (
    CommitCoordinator,
    CommitLedger,
    ConfigurationError,
    RecoveryCoordinator,
    SinkError,
    TransactionContext,
    TransactionLostError,
)
from twopc.faultinject import LocalRedis, LocalRedisCluster
from twopc.sinks.redis import HSetOp, IncrByOp, RedisHandle, RedisSink, dispose_clients, key_slot
from twopc.sinks.redis import _lua as lua
from twopc.sinks.redis_source import Offset, RedisStreamReader, StreamOptions
from twopc.spi.operations import BatchState
from twopc.spi.runtime import CommitRetry

from tests._stream_helpers import rows_of

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])
RETRY = CommitRetry(retries=1, backoff=0.1)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRedisCluster]:
    with LocalRedisCluster(node_timeout_ms=2000) as c:
        yield c
    dispose_clients()


@pytest.fixture(autouse=True)
def _every_node_back(cluster: LocalRedisCluster) -> Iterator[None]:
    """A test that kills a node leaves it for this fixture to start again (it rejoins as a
    replica), so the next test finds three masters with a replica each."""
    yield
    for node in cluster.nodes:
        if not node.running:
            cluster.restart_node(node)


class Target:
    """One sink id under its own hash tag on the cluster: the sink, a ledger, a direct
    cluster client, and what the target holds."""

    def __init__(self, cluster: LocalRedisCluster, tmp_path: Path, *, url: str | None = None,
                 on: LocalRedis | None = None) -> None:
        """*url*: the one node the sink is given (default: the cluster's); *on*: a master
        that must serve the target's slot (default: wherever its random hash tag lands)."""
        self.cluster = cluster
        self.tag = "c" + uuid.uuid4().hex[:10]
        while on is not None and cluster.master_of(key_slot("{" + self.tag + "}")).port != on.port:
            self.tag = "c" + uuid.uuid4().hex[:10]
        self.slot = key_slot("{" + self.tag + "}")
        self.sink_id = "s" + uuid.uuid4().hex[:10]
        self.sink = RedisSink(url or cluster.url, [HSetOp("{{" + self.tag + "}}:row:{id}", columns=("s",)),
                                            IncrByOp("{{" + self.tag + "}}:rows", by=1)], hash_tag=self.tag)
        self.sink.validate(SCHEMA)
        self.ledger = CommitLedger(str(tmp_path / "ckpt"))
        self.coordinator = CommitCoordinator(self.sink, self.ledger, self.sink_id, retry=RETRY)
        self.direct = RedisCluster.from_url(cluster.url, decode_responses=True)
        self._ids = itertools.count(1)

    def prepare(self, batch_id: int, rows: int = 4) -> tuple[list[RedisHandle], list[int]]:
        """Two task attempts of *batch_id*, prepared; their handles and ids."""
        ids = [next(self._ids) for _ in range(rows)]
        handles = []
        for part, chunk in enumerate((ids[: rows // 2], ids[rows // 2:])):
            txn = self.sink.begin_transaction(TransactionContext(self.sink_id, batch_id, part, 1))
            self.sink.invoke_batch(txn, pa.record_batch({"id": pa.array(chunk, pa.int64()),
                                                         "s": pa.array([f"v{i}" for i in chunk])}, schema=SCHEMA))
            handles.append(self.sink.pre_commit(txn))
        return handles, ids

    def commit(self, batch_id: int, rows: int = 4) -> list[int]:
        handles, ids = self.prepare(batch_id, rows)
        assert self.coordinator.commit_batch(batch_id, handles).action == "committed"
        return ids

    def visible(self) -> tuple[list[int], int]:
        """(ids of the row hashes, the row counter): equal length and no duplicate when
        every transaction was applied exactly once."""
        node = self.cluster.master_of(self.slot)
        keys = self.cluster.command(node, "CLUSTER", "GETKEYSINSLOT", self.slot, 100_000)
        ids = sorted(int(k.rsplit(":", 1)[1]) for k in keys if k.startswith("{" + self.tag + "}:row:"))
        return ids, int(self.direct.get("{" + self.tag + "}:rows") or 0)

    def assert_exactly_once(self, want: list[int]) -> None:
        ids, counter = self.visible()
        assert ids == sorted(want) and counter == len(want), (ids, counter, sorted(want))
        assert self.sink.list_prepared(self.sink_id) == []
        assert not self.ledger.pending()

    def close(self) -> None:
        self.direct.close()


@pytest.fixture
def target(cluster: LocalRedisCluster, tmp_path: Path) -> Iterator[Target]:
    t = Target(cluster, tmp_path)
    yield t
    t.close()


def _another_master(cluster: LocalRedisCluster, slot: int) -> Any:
    owner = cluster.master_of(slot)
    return next(cluster.by_port(v.port) for v in cluster.view() if v.is_master and v.port != owner.port)


def test_the_sink_runs_on_the_cluster_and_refuses_a_key_outside_its_slot(
        cluster: LocalRedisCluster, target: Target) -> None:
    assert target.sink._server.config.pooled().cluster  # the RedisCluster client, not a single node
    want = target.commit(0) + target.commit(1)
    target.assert_exactly_once(want)
    # The sink loads its library on every primary; replicas get it through replication, which is
    # asynchronous (a replica still catching up had none yet in one run under load): wait for it,
    # bounded. A primary never lacks it (loaded before the commit ran there).
    deadline = time.monotonic() + 60
    while True:
        libraries = {n.port: cluster.command(n, "FUNCTION", "LIST", "LIBRARYNAME", lua.LIBRARY_NAME)
                     for n in cluster.nodes if n.running}
        primaries = {v.port for v in cluster.view() if v.is_master}
        assert all(libraries[p] for p in primaries), f"the library is missing on a primary: {libraries}"
        if all(libraries.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert all(libraries.values()), f"the library never reached some replica: {libraries}"  # replicas too
    bad = RedisSink(cluster.url, [HSetOp("row:{id}", columns=("s",))], hash_tag=target.tag)
    bad.validate(SCHEMA)
    txn = bad.begin_transaction(TransactionContext(target.sink_id, 2, 0, 1))
    with pytest.raises(ConfigurationError, match="hashes to cluster slot"):
        bad.invoke_batch(txn, pa.record_batch({"id": pa.array([1], pa.int64()), "s": pa.array(["x"])}, schema=SCHEMA))


def test_a_slot_moved_between_prepare_and_commit_is_committed_once_through_moved(
        cluster: LocalRedisCluster, target: Target) -> None:
    want = target.commit(0)
    handles, ids = target.prepare(1)
    source, dest = cluster.master_of(target.slot), _another_master(cluster, target.slot)
    cluster.migrate_slot(target.slot, dest)
    client = target.sink._server.config.pooled().client
    assert client.nodes_manager.get_node_from_slot(target.slot).port == source.port  # stale: MOVED follows
    assert target.coordinator.commit_batch(1, handles).action == "committed"
    assert cluster.master_of(target.slot).port == dest.port
    assert cluster.command(source, "CLUSTER", "COUNTKEYSINSLOT", target.slot) == 0
    target.assert_exactly_once(want + ids)


def test_a_commit_during_a_migration_is_served_by_ask_or_refused_before_its_first_write(
        cluster: LocalRedisCluster, target: Target) -> None:
    """Batch 1: every key of the slot moved, the slot not yet handed over: the old owner
    answers ASK and the importing node commits. Batch 2: only the row counter moved: the
    commit function finds a key it may not touch during its checks, fails with nothing
    applied, and recovery finishes the batch once the migration is done."""
    want = target.commit(0)
    handles, ids = target.prepare(1)
    dest = _another_master(cluster, target.slot)
    source = cluster.begin_migration(target.slot, dest)
    cluster.move_keys(target.slot, source, dest)
    assert target.coordinator.commit_batch(1, handles).action == "committed"
    assert cluster.command(source, "CLUSTER", "COUNTKEYSINSLOT", target.slot) == 0
    cluster.finish_migration(target.slot, dest)
    want += ids
    target.assert_exactly_once(want)

    handles, ids = target.prepare(2)  # now on `dest`; move it back, counter first
    source, dest = dest, source
    cluster.begin_migration(target.slot, dest)
    cluster.move_keys(target.slot, source, dest, ["{" + target.tag + "}:rows"])
    with pytest.raises(SinkError, match="non local key"):
        target.coordinator.commit_batch(2, handles)
    assert target.ledger.state(2) is BatchState.DECIDED
    rows_on_source = [k for k in cluster.command(source, "CLUSTER", "GETKEYSINSLOT", target.slot, 100_000)
                      if ":row:" in k]
    assert len(rows_on_source) == len(want), "the refused commit applied some of its writes"
    cluster.move_keys(target.slot, source, dest)
    cluster.finish_migration(target.slot, dest)
    report = RecoveryCoordinator(target.sink, target.ledger, sink_id=target.sink_id).run()
    assert report.finished_batches == [2]
    target.assert_exactly_once(want + ids)


def test_a_coordinated_failover_between_prepare_and_commit_loses_nothing(
        cluster: LocalRedisCluster, target: Target) -> None:
    want = target.commit(0)
    handles, ids = target.prepare(1)
    old = cluster.master_of(target.slot)
    replica = cluster.replica_of(old)
    cluster.failover(replica)
    assert cluster.master_of(target.slot).port == replica.port
    target.sink._server.load(force=True)  # as after NOSCRIPT: the client's map still names `old` a primary
    assert target.coordinator.commit_batch(1, handles).action == "committed"
    target.assert_exactly_once(want + ids)


@pytest.mark.parametrize("url_names", ["the master that dies", "another master"])
def test_a_master_killed_between_prepare_and_commit_is_replaced_and_the_commit_lands_once(
        cluster: LocalRedisCluster, tmp_path: Path, url_names: str) -> None:
    """The replica had received the prepared staging (the test waits for ``WAIT 1``; twopc
    does not): after the automatic failover the commit finds it and applies it once, also
    when the node named in the sink's URL is the one that died (the commit must not ask
    that node which keys an ``FCALL`` has)."""
    cluster.wait_stable()
    live = {n.port for n in cluster.nodes if n.running}
    masters = [cluster.by_port(v.port) for v in cluster.view() if v.is_master and v.slots and v.port in live]
    dies, other = masters[0], masters[1]
    target = Target(cluster, tmp_path, url=(dies if url_names == "the master that dies" else other).url, on=dies)
    want = target.commit(0)
    handles, ids = target.prepare(1)
    old = cluster.master_of(target.slot)
    replica = cluster.replica_of(old)
    assert cluster.wait_replicated(old) == 1
    old.kill()
    cluster.wait_master(replica)  # elected by the other masters after cluster-node-timeout
    try:
        assert target.coordinator.commit_batch(1, handles).action == "committed"
        target.assert_exactly_once(want + ids)
    finally:
        target.close()


def test_wait_replicated_counts_a_replica_only_once_it_applied_the_writes_before_the_call(
        cluster: LocalRedisCluster, target: Target) -> None:
    """The loss-window tests below rely on it to know what a replica holds before cutting it off.
    A frozen replica keeps its link, so a ``WAIT`` sent on a connection of its own would count it."""
    target.commit(0)
    old = cluster.master_of(target.slot)
    replica = cluster.replica_of(old)
    assert cluster.wait_replicated(old) == 1
    assert replica.pid is not None
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        target.commit(1)
        assert cluster.wait_replicated(old, timeout_s=1.0) == 0
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    assert cluster.wait_replicated(old) == 1


def test_a_prepared_staging_lost_in_a_failover_is_a_transaction_lost_error_not_silent_loss(
        cluster: LocalRedisCluster, target: Target) -> None:
    """Asynchronous replication: the master acknowledged the prepare, the replica never got
    it, the master dies, the replica takes over. The commit of the decided batch finds
    neither staging nor marker: TransactionLostError, the batch stays decided, every retry
    says so again; nothing of the batch is applied."""
    want = target.commit(0)
    old = cluster.master_of(target.slot)
    replica = cluster.replica_of(old)
    # batch 0 reached the replica before it is cut off (replication is asynchronous: without
    # this, a loaded machine lets the takeover lose batch 0 too, which is not what is tested)
    assert cluster.wait_replicated(old) == 1
    cluster.detach_replica(replica)
    try:
        handles, _ = target.prepare(1)  # acknowledged by `old` only
        old.kill()
        cluster.failover(replica, "TAKEOVER")
    finally:
        cluster.reattach_replica(replica)
    with pytest.raises(TransactionLostError, match=r"batch 1 .* neither prepared nor committed"):
        target.coordinator.commit_batch(1, handles)
    assert target.ledger.state(1) is BatchState.DECIDED
    with pytest.raises(TransactionLostError):
        RecoveryCoordinator(target.sink, target.ledger, sink_id=target.sink_id).run()
    ids_now, counter = target.visible()
    assert ids_now == sorted(want) and counter == len(want)
    cluster.restart_node(old)  # rejoins as a replica and drops what it alone had
    assert target.visible() == (sorted(want), len(want))


def test_a_commit_lost_in_a_failover_is_applied_again_by_recovery_from_the_decision(
        cluster: LocalRedisCluster, target: Target) -> None:
    """The prepare reached the replica, the commit did not: after the takeover the batch's
    writes and markers are gone although the ledger marked it committed, and its staging
    is prepared again. The next micro-batch's sweep (as recovery at the next start would)
    commits it from the recorded decision: each id exactly once. Until then the batch is not
    visible."""
    want = target.commit(0)
    handles, ids = target.prepare(1)
    old = cluster.master_of(target.slot)
    replica = cluster.replica_of(old)
    assert cluster.wait_replicated(old) == 1
    cluster.detach_replica(replica)
    try:
        assert target.coordinator.commit_batch(1, handles).action == "committed"  # acknowledged by `old` only
        assert target.ledger.state(1) is BatchState.COMMITTED
        old.kill()
        cluster.failover(replica, "TAKEOVER")
    finally:
        cluster.reattach_replica(replica)
    assert target.visible() == (sorted(want), len(want))  # batch 1 vanished
    assert {h.txn_id for h in target.sink.list_prepared(target.sink_id)} == {h.txn_id for h in handles}
    more = target.commit(2)
    target.assert_exactly_once(want + ids + more)


STREAM_SCHEMA = StructType([StructField("stream", StringType()), StructField("id", StringType()),
                            StructField("timestamp", TimestampType()),
                            StructField("fields", MapType(StringType(), StringType())),
                            StructField("n", LongType())])


def test_the_stream_source_reads_hash_tagged_streams_on_several_masters_across_a_slot_move(
        cluster: LocalRedisCluster, tmp_path: Path) -> None:
    """Two streams under two hash tags on two masters: planned, read and acknowledged like
    Spark does; then one stream's slot moves to another master and the next micro-batch is
    planned, read and acknowledged through the stale client (MOVED), nothing missed or read
    twice."""
    direct = RedisCluster.from_url(cluster.url, decode_responses=True)
    tags: list[str] = []
    while len({cluster.master_of(key_slot("{" + t + "}")).port for t in tags}) < 2:
        tags = [f"st{uuid.uuid4().hex[:8]}" for _ in range(2)]
    streams = [f"{{{t}}}:events" for t in tags]
    for s in streams:
        for i in range(1, 6):
            direct.xadd(s, {"n": str(i)}, id=f"1000-{i}")
    o = StreamOptions.read({"url": cluster.url, "streams": ",".join(streams), "group": "g",
                            "startingPosition": "earliest", "maxEntriesPerPartition": "2", "fieldsSchema": "n BIGINT"})
    rd = RedisStreamReader(o, STREAM_SCHEMA)

    def one_batch(start: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        end = rd.latestOffset(start, ReadAllAvailable())
        rows = [(r[0], r[1]) for p in rd.partitions(start, end) for r in rows_of(rd.read(p))]
        rd.commit(end)
        return end, rows

    start = rd.initialOffset()
    end, got = one_batch(start)
    slot = key_slot(streams[0])
    cluster.migrate_slot(slot, _another_master(cluster, slot))
    for s in streams:
        for i in range(6, 9):
            direct.xadd(s, {"n": str(i)}, id=f"1000-{i}")
    end2, more = one_batch(end)
    got += more
    want = [(s, f"1000-{i}") for s in streams for i in range(1, 9)]
    assert sorted(got) == sorted(want)
    assert all(Offset.from_json(end2).streams[s].count == 8 for s in streams)
    for s in streams:
        group = direct.xinfo_groups(s)[0]
        assert group["pending"] == 0 and group["last-delivered-id"] == "1000-8"
    direct.close()
