"""The Spark runtime end to end, in-process, with the file sink: batch writes with
txnVersion, streaming writes, foreachBatch, and the errors users meet first."""

from __future__ import annotations

from pathlib import Path

import pytest

from twopc import CommitLedger, foreach_batch_writer, sinks
from twopc.recovery.demos.demo import INPUT_SCHEMA, write_input
from twopc.sinks import FileSink

from tests._filesink_helpers import committed_ids


@pytest.fixture(scope="module", autouse=True)
def _registered(spark) -> None:
    sinks.register_all(spark)


def _df(spark, lo: int, hi: int):
    return spark.range(lo, hi, numPartitions=3).selectExpr("id", "cast(id as string) as payload")


def _batch_write(df, out: Path, ck: Path, version: int | None, mode: str = "append") -> None:
    w = df.write.format("twopc-file").mode(mode).option("path", str(out)).option("checkpointLocation", str(ck))
    if version is not None:
        w = w.option("txnVersion", str(version))
    w.save()


def test_batch_write_is_all_or_nothing_and_a_rerun_writes_nothing(spark, tmp_path) -> None:
    out, ck = tmp_path / "out", tmp_path / "ck"
    _batch_write(_df(spark, 0, 100), out, ck, version=1)
    assert committed_ids(FileSink(str(out))) == list(range(100))
    _batch_write(_df(spark, 0, 100), out, ck, version=1)  # the same job, rerun
    assert committed_ids(FileSink(str(out))) == list(range(100))
    _batch_write(_df(spark, 100, 150), out, ck, version=2)
    assert committed_ids(FileSink(str(out))) == list(range(150))
    assert FileSink(str(out)).list_prepared(CommitLedger(str(ck)).recorded_sink_id() or "") == []


def test_batch_write_without_txn_version_names_the_fix(spark, tmp_path) -> None:
    with pytest.raises(Exception, match="txnVersion"):
        _batch_write(_df(spark, 0, 3), tmp_path / "out", tmp_path / "ck", version=None)
    assert committed_ids(FileSink(str(tmp_path / "out"))) == []


def test_batch_write_without_checkpoint_location_names_the_fix(spark, tmp_path) -> None:
    with pytest.raises(Exception, match="checkpointLocation"):
        _df(spark, 0, 3).write.format("twopc-file").mode("append").option("path", str(tmp_path)).save()


def test_overwrite_is_refused_before_anything_is_written(spark, tmp_path) -> None:
    with pytest.raises(Exception, match="overwrite"):
        _batch_write(_df(spark, 0, 3), tmp_path / "out", tmp_path / "ck", version=1, mode="overwrite")
    assert committed_ids(FileSink(str(tmp_path / "out"))) == []


def _stream(spark, input_dir: Path):
    return spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(input_dir))


def test_streaming_write_is_exactly_once_across_restarts(spark, tmp_path) -> None:
    inp, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    ids = write_input(inp, files=3, rows_per_file=20)

    def run() -> None:
        q = (_stream(spark, inp).writeStream.format("twopc-file").option("path", str(out))
             .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
        q.awaitTermination()
        assert q.exception() is None

    run()
    assert committed_ids(FileSink(str(out))) == ids
    ledger = CommitLedger(str(ck))
    assert ledger.committed_batches() == [0, 1, 2]
    # New input arrives; the query restarts from its checkpoint and writes only the new rows.
    more = write_input(inp, files=1, rows_per_file=20, first_file=3)
    run()
    assert committed_ids(FileSink(str(out))) == ids + more
    assert ledger.committed_batches() == [0, 1, 2, 3]


def test_foreach_batch_adapter_writes_each_micro_batch_once(spark, tmp_path) -> None:
    inp, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    ids = write_input(inp, files=2, rows_per_file=10)
    fn = foreach_batch_writer("twopc-file", str(ck / "twopc-sink"), path=str(out))
    q = (_stream(spark, inp).writeStream.foreachBatch(fn).option("checkpointLocation", str(ck))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    assert committed_ids(FileSink(str(out))) == ids
    # Spark replays a micro-batch with the same id after a crash: it writes nothing.
    fn(spark.createDataFrame([(999, "x", 1.0)], INPUT_SCHEMA), 1)
    assert committed_ids(FileSink(str(out))) == ids


def test_only_the_plan_time_instance_runs_recovery() -> None:
    """Spark builds the data source from options at plan time, and ships pickled copies to
    the commit process: copies must never think they are the plan-time instance (recovery
    there would roll back the batch being committed)."""
    import pickle

    from twopc.sinks import FileDataSource

    ds = FileDataSource({"path": "/tmp/x", "checkpointLocation": "/tmp/ck"})
    assert ds._plan_time is True
    assert pickle.loads(pickle.dumps(ds))._plan_time is False


def test_sink_id_can_be_set_and_is_bound_to_the_checkpoint(spark, tmp_path) -> None:
    out, ck = tmp_path / "out", tmp_path / "ck"
    df = _df(spark, 0, 10)
    (df.write.format("twopc-file").mode("append").option("path", str(out)).option("checkpointLocation", str(ck))
       .option("txnVersion", "1").option("sinkId", "orders-daily").save())
    assert CommitLedger(str(ck)).recorded_sink_id() == "orders-daily"
    assert all(Path(p).name.startswith("orders-daily~") for p in FileSink(str(out)).committed_files())
    with pytest.raises(Exception, match="belongs to sink id 'orders-daily'"):
        (df.write.format("twopc-file").mode("append").option("path", str(out)).option("checkpointLocation", str(ck))
           .option("txnVersion", "2").option("sinkId", "another").save())
    with pytest.raises(Exception, match="sinkId 'bad id!' is invalid"):
        (df.write.format("twopc-file").mode("append").option("path", str(out))
           .option("checkpointLocation", str(tmp_path / "ck2")).option("txnVersion", "1").option("sinkId", "bad id!")
           .save())
