"""The composite sink through Spark on real servers, one test per mix of targets (the full
crash matrix runs on one mix, in ``test_composite_chaos.py``):

- PostgreSQL table + Redis counters derived by a transform, streaming, built from Python
  objects with ``twopc.composite``;
- two PostgreSQL tables on two servers, a batch write with a JSON ``targets`` option;
- PostgreSQL + MariaDB XA through the ``foreachBatch`` adapter;
- one wrong participant fails the write on the driver, named, with nothing written;
- a participant's server SIGKILLed between prepare and commit, then restarted: recovery
  finishes the decided batch in every target and rolls back the undecided one in every
  target (the coordinator as Spark's driver runs it, tasks as Spark's tasks run them);
- the same window inside a Spark streaming query: a fault plan crashes the participant's
  PostgreSQL server right after a batch's decision and, for the next batch, between the
  two participants' commits; the server restarts and the query itself finishes both.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import redis

import twopc
import twopc.spi
from twopc import (
    CommitCoordinator,
    CommitLedger,
    RecoveryCoordinator,
    SinkError,
    TransactionContext,
    faultinject,
    sink_status,
    sinks,
)
from twopc.faultinject import ENV_CONTROL, FaultControl, LocalPostgres
from twopc.recovery.demos.demo import INPUT_SCHEMA, write_input
from twopc.sinks import OptionsCompositeSink, RedisSink

from tests._composite_helpers import CompositeHarness, composite_harness, per_parity
from tests._kit_harnesses import _read, _table


@pytest.fixture(scope="module", autouse=True)
def _registered(spark: Any) -> None:
    sinks.register_all(spark)


@pytest.fixture(scope="module")
def replica_server() -> Iterator[LocalPostgres]:
    """A second PostgreSQL server of this module's own (its tests kill and restart it)."""
    server = LocalPostgres(max_prepared_transactions=16)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _stream(spark: Any, folder: Path, fmt: str, ck: Path, **options: str) -> None:
    q = (spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(folder))
         .writeStream.format(fmt).options(**options).option("checkpointLocation", str(ck))
         .trigger(availableNow=True).start())
    q.awaitTermination()


def test_postgres_table_and_redis_counters_from_python_objects(spark: Any, postgres_url: str, redis_url: str,
                                                                tmp_path: Path) -> None:
    tag = f"cnt{uuid.uuid4().hex[:8]}"
    mapping = json.dumps([{"op": "HINCRBY", "key": "{{" + tag + "}}:by_parity", "field": "{parity}", "by": "{n}"}])
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    ddl = "CREATE TABLE {name} (id bigint NOT NULL, payload text, amount double precision, twopc_batch bigint)"
    with _table(postgres_url, ddl) as (table, engine):
        orders = sinks.participant("orders", "twopc-postgres", {"url": postgres_url, "dbtable": table},
                                   batch_column="twopc_batch")
        counters = twopc.Participant("counters", RedisSink.from_options({"url": redis_url, "hashTag": tag,
                                                                        "mapping": mapping}),
                                     columns=["id"], transform=per_parity)
        twopc.composite("orders-and-counters", orders, counters, spark=spark)
        ids = write_input(tmp_path / "in", files=3, rows_per_file=30)
        _stream(spark, tmp_path / "in", "orders-and-counters", tmp_path / "ck")

        assert sorted(_read(engine, table)) == ids
        with engine.connect() as c:  # the batch column: one input file per micro-batch
            rows = c.exec_driver_sql(f"SELECT twopc_batch, count(*) FROM {table} GROUP BY 1").all()
        per_batch: dict[int, int] = {int(b): int(n) for b, n in rows}
        assert per_batch == {0: 30, 1: 30, 2: 30}
        counts = client.hgetall("{" + tag + "}:by_parity")
        assert {k: int(v) for k, v in counts.items()} == {"even": 45, "odd": 45}
        ledger = CommitLedger(str(tmp_path / "ck"))
        assert ledger.committed_batches() == [0, 1, 2] and not ledger.pending()
        sink_id = ledger.recorded_sink_id()
        assert sink_id is not None
        for batch in ledger.committed_batches():
            decision = ledger.decision(batch)
            assert decision is not None
            assert all(isinstance(h, twopc.spi.runtime.CompositeHandle) for h in decision.handles)
            assert {name for h in decision.handles if isinstance(h, twopc.spi.runtime.CompositeHandle)
                    for name, _ in h.parts} == {"orders", "counters"}
        assert twopc.spi.runtime.CompositeSink([orders, counters]).list_prepared(sink_id) == []
    client.close()


def _as_json_targets(harness: CompositeHarness) -> dict[str, str]:
    """The harness's prefixed options as a JSON ``targets`` option, credentials left as
    prefixed options (the way to keep them out of the JSON)."""
    targets: dict[str, dict[str, Any]] = {}
    kept = {}
    for key, value in harness.options.items():
        if key == "targets":
            continue
        name, _, opt = key.partition(".")
        spec = targets.setdefault(name, {"name": name, "options": {}})
        if opt in ("user", "password"):
            kept[key] = value
        elif opt in ("format", "columns"):
            spec[opt] = value
        else:
            spec["options"][opt] = value
    return {"targets": json.dumps(list(targets.values())), **kept}


def test_two_postgres_servers_batch_write_with_json_targets(spark: Any, postgres_url: str,
                                                           replica_server: LocalPostgres, tmp_path: Path) -> None:
    with composite_harness(["orders", "replica"], postgres_url=postgres_url,
                           second_postgres_url=replica_server.url) as harness:
        options = _as_json_targets(harness)
        ck = str(tmp_path / "ck")

        def write(lo: int, hi: int, version: int) -> None:
            df = spark.range(lo, hi, numPartitions=3).selectExpr(
                "id", "concat('event-', id) as payload", "cast(id as double) * 0.5 as amount")
            (df.write.format("twopc-composite").mode("append").options(**options)
             .option("checkpointLocation", ck).option("txnVersion", str(version)).save())

        write(0, 300, 1)
        write(0, 300, 1)  # a rerun of the same txnVersion writes nothing, in either target
        write(300, 400, 2)
        sink_id = CommitLedger(ck).recorded_sink_id()
        assert sink_id is not None
        harness.verify(sink_id) if harness.verify else None
        assert sorted(harness.read_ids()) == list(range(400))


def test_postgres_and_mariadb_xa_through_foreach_batch(spark: Any, postgres_url: str, mariadb_url: str,
                                                       tmp_path: Path) -> None:
    with composite_harness(["orders", "xa"], postgres_url=postgres_url, mariadb_url=mariadb_url) as harness:
        ck = str(tmp_path / "ck-writes")
        writer = twopc.foreach_batch_writer("twopc-composite", ck, **harness.options)
        ids = write_input(tmp_path / "in", files=2, rows_per_file=25)
        q = (spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
             .writeStream.foreachBatch(writer).option("checkpointLocation", str(tmp_path / "ck-query"))
             .trigger(availableNow=True).start())
        q.awaitTermination()
        sink_id = CommitLedger(ck).recorded_sink_id()
        assert sink_id is not None and harness.verify is not None
        harness.verify(sink_id)
        assert sorted(harness.read_ids()) == ids


def test_one_wrong_participant_fails_the_write_before_any_task_and_is_named(spark: Any, postgres_url: str,
                                                                          redis_url: str, tmp_path: Path) -> None:
    with composite_harness(["events", "orders"], postgres_url=postgres_url, redis_url=redis_url) as harness:
        options = {**harness.options, "orders.dbtable": "no_such_table_here"}
        df = spark.range(0, 10).selectExpr("id", "concat('event-', id) as payload", "cast(id as double) as amount")
        with pytest.raises(Exception, match=r"composite participant 'orders'.*no_such_table_here") as err:
            (df.write.format("twopc-composite").mode("append").options(**options)
             .option("checkpointLocation", str(tmp_path / "ck")).option("txnVersion", "1").save())
        assert harness.options["orders.password"] not in str(err.value)
        assert harness.readers["events"]() == [] and harness.readers["orders"]() == []
        assert not Path(tmp_path, "ck", "twopc", "decisions").exists() or not list(
            Path(tmp_path, "ck", "twopc", "decisions").iterdir())


def _task(sink: OptionsCompositeSink, sink_id: str, batch: int, partition: int, ids: list[int]) -> Any:
    """One task attempt as the Spark runtime runs it: open, load, prepare."""
    txn = sink.begin_transaction(TransactionContext(sink_id, batch, partition, 100 + batch * 10 + partition))
    sink.invoke_batch(txn, pa.record_batch({"id": pa.array(ids, pa.int64()),
                                            "payload": pa.array([f"event-{i}" for i in ids]),
                                            "amount": pa.array([i * 0.5 for i in ids])}))
    return sink.pre_commit(txn)


def test_a_participant_server_killed_between_prepare_and_commit(redis_url: str, replica_server: LocalPostgres,
                                                                tmp_path: Path) -> None:
    """Batch 0 is decided, then the replica's server is SIGKILLed before its commit: status
    and recovery name the participant that cannot be reached, and recovery commits nothing
    while it is down; once the server is back, status shows batch 0 in doubt and recovery
    finishes it in both. Batch 1 is
    prepared everywhere, undecided, when the server dies: recovery rolls it back in both."""
    with composite_harness(["events", "replica"], redis_url=redis_url,
                           second_postgres_url=replica_server.url) as harness:
        sink = OptionsCompositeSink.from_options(harness.options)
        schema = pa.schema([("id", pa.int64()), ("payload", pa.string()), ("amount", pa.float64())])
        sink.configure_write(schema, overwrite=False, streaming=True, checkpointed=True)
        sink.validate(schema)
        ledger = CommitLedger(str(tmp_path / "ck"))
        sid = ledger.bind_sink_id(None, default=f"kill{uuid.uuid4().hex[:8]}")
        ledger.claim()
        coord = CommitCoordinator(sink, ledger, sid)
        decided = [_task(sink, sid, 0, p, list(range(p * 10, p * 10 + 10))) for p in range(2)]
        with (faultinject.armed("after_decision@batch=0:raise", state_dir=str(tmp_path / "faults")),
              pytest.raises(faultinject.InjectedFault)):
            coord.commit_batch(0, decided)
        undecided = [_task(sink, sid, 1, p, list(range(100 + p * 10, 110 + p * 10))) for p in range(2)]
        sink.close()

        replica_server.kill()
        with pytest.raises(SinkError, match="composite participant 'replica'"):  # twopc status names it
            sink_status(sink, CommitLedger(str(tmp_path / "ck")), sid)
        with pytest.raises(SinkError):
            RecoveryCoordinator(sink, CommitLedger(str(tmp_path / "ck"))).run()
        # recover lists every participant's prepared transactions before it claims the ledger or
        # commits anything: with the replica down it stops there, and Redis shows nothing yet
        assert harness.readers["events"]() == []

        replica_server.restart()
        for engine in harness.engines:  # their pooled connections died with the server
            engine.dispose()
        status = sink_status(sink, CommitLedger(str(tmp_path / "ck")), sid)
        states = {(t.batch_id, t.state) for t in status.transactions}
        assert states == {(0, "in-doubt"), (1, "orphan")}, status.transactions
        assert all("replica: prepared" in t.holds for t in status.transactions if t.batch_id == 0)
        report = RecoveryCoordinator(sink, CommitLedger(str(tmp_path / "ck"))).run()
        assert report.finished_batches == [0] and len(report.rolled_back) == len(undecided)
        assert harness.verify is not None
        harness.verify(sid)
        assert sorted(harness.read_ids()) == list(range(20))



def test_a_participant_server_crashed_and_down_inside_a_spark_query(
        spark: Any, redis_url: str, replica_server: LocalPostgres, tmp_path: Path) -> None:
    """One streaming query over two one-file batches (Redis events, then the replica's
    table); the driver's commit fires the plan's rules on the replica's server. Batch 0:
    right after the decision, before any commit, the server crashes (PostgreSQL's
    immediate shutdown) and restarts; its prepared transactions survive and the query
    commits the batch. Batch 1: between the participants' commits (Redis already shows
    it) the server goes down and stays down; once the commit's retries are spent the query
    fails with the batch pending, naming the participant; a restart fails at plan time
    while the server is down; once it is back, the replica still lacks batch 1 until the
    restart finishes it (and ignores Spark's replay of it). Then every target holds each
    id once, batch by batch, and nothing is left prepared."""
    plan = "after_decision@batch=0:server/replica/crash,between_commits@batch=1:server/replica/down/for=600s"
    fast = {"commitRetries": "1", "commitRetryBackoff": "0.1", "replica.connectTimeout": "2s"}
    sc = spark.sparkContext
    with (composite_harness(["events", "replica"], redis_url=redis_url, second_postgres_url=replica_server.url,
                            rows_per_batch=20) as harness,
          FaultControl() as control):
        control.add_server("replica", replica_server)
        ids = write_input(tmp_path / "in", files=2, rows_per_file=20)

        def run() -> None:
            _stream(spark, tmp_path / "in", "twopc-composite", tmp_path / "ck", **harness.options, **fast)

        sc.environment[ENV_CONTROL] = control.path
        try:
            with faultinject.armed(plan, tmp_path / "faults", spark_context=sc):
                sinks.register_all(spark)  # a data source's Python workers get the environment of its registration
                with pytest.raises(Exception, match="CommitPendingError") as err:
                    run()
        finally:
            sc.environment.pop(ENV_CONTROL, None)
            sinks.register_all(spark)  # disarmed again for the tests after this one
        assert "batch 1 of sink" in str(err.value)
        assert "composite participant 'replica' (PostgreSQL" in str(err.value), str(err.value)[:2000]
        assert ", after events committed batch 1: cannot connect" in str(err.value)
        assert control.fired == {"server.crash": 1, "server.down": 1} and not control.errors, control.errors
        fired = faultinject.read_firings(tmp_path / "faults")
        assert [f.split(" (")[0] for f in fired] == ["faultinject: firing after_decision",
                                                    "faultinject: firing between_commits"], fired
        assert not replica_server.running
        assert sorted(harness.readers["events"]()) == ids  # Redis committed batch 1 before the replica

        with pytest.raises(Exception, match=r"composite participant 'replica'.*cannot connect"):
            run()  # plan-time recovery needs every target
        control.settle()  # the server is back
        for engine in harness.engines:  # their pooled connections died with the server
            engine.dispose()
        assert sorted(harness.readers["replica"]()) == ids[:20]  # batch 1 waits there, prepared
        run()
        ledger = CommitLedger(str(tmp_path / "ck"))
        assert ledger.committed_batches() == [0, 1] and not ledger.pending()
        sink_id = ledger.recorded_sink_id()
        assert sink_id is not None and harness.verify is not None
        harness.verify(sink_id)
        assert sorted(harness.read_ids()) == ids
