"""Checkpoint locations off the local disk, and owner epochs that fence zombie drivers.

The S3 tests run against a real S3 server on loopback (moto's ThreadedMotoServer, see
tests/_s3.py): conditional PutObject (``If-None-Match: *``) is what makes a decision
write-once there.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

from twopc import CommitLedger, ConfigurationError, FencedError
from twopc._driver_identity import DriverIdentity
from twopc.sinks import FileHandle
from twopc.spi import ProtocolError
from twopc.spi.operations import BatchState, Decision

_DRIVER_A = DriverIdentity(host="driver-a", pid=101, started=1)
_DRIVER_B = DriverIdentity(host="driver-b", pid=202, started=2)


def _decision(batch: int, n: int = 2, tag: str = "0") -> Decision:
    return Decision("s1", batch, tuple(FileHandle(f"s1~{batch}~{p}~{p}~{tag}", "s1", batch, p, p) for p in range(n)))


@pytest.mark.parametrize("location", ["dbfs:/ck/q", "hdfs:/ck/q", "hdfs://nn:8020/ck/q", "gs://b/ck", "gcs://b/ck",
                                      "abfss://c@acct.dfs.core.windows.net/ck", "wasbs://c@acct/ck", "viewfs:/ck",
                                      "odd-scheme:/ck"])
def test_a_scheme_path_is_never_a_local_folder(tmp_path, monkeypatch, location: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match="never taken for a local folder") as err:
        CommitLedger(location)
    assert location in str(err.value) and ("s3://" in str(err.value) or "local path" in str(err.value))
    assert list(tmp_path.iterdir()) == []  # nothing created under the working directory


def test_file_uris_and_plain_paths_stay_local(tmp_path) -> None:
    CommitLedger(f"file:{tmp_path}/a").record_decision(_decision(1))
    assert CommitLedger(str(tmp_path / "a")).state(1) is BatchState.DECIDED


@pytest.fixture
def s3_location(s3_server: str) -> str:
    return f"s3a://ckpts/{uuid.uuid4().hex}/query"


def test_s3_ledger_records_a_decision_at_most_once(s3_location: str) -> None:
    ledger = CommitLedger(s3_location)
    assert ledger.bind_sink_id(None, "s1") == "s1"
    first = ledger.record_decision(_decision(3))
    other = CommitLedger(s3_location.replace("s3a://", "s3://"))  # the same objects, another driver's view
    assert other.record_decision(_decision(3)).txn_ids == first.txn_ids
    with pytest.raises(ProtocolError, match="different decision"):
        other.record_decision(_decision(3, n=1))
    other.mark_committed(3)
    assert ledger.state(3) is BatchState.COMMITTED and ledger.pending() == []
    assert ledger.purge(keep_last=1) == []


def test_s3_conditional_create_is_refused_by_the_server(s3_location: str) -> None:
    """The write-once property is the server's: a second conditional PUT gets 412."""
    import boto3

    ledger = CommitLedger(s3_location)
    ledger.record_decision(_decision(4))
    bucket, _, prefix = s3_location.removeprefix("s3a://").partition("/")
    key = f"{prefix}/twopc/decisions/{4:020d}.json"
    with pytest.raises(Exception, match=r"PreconditionFailed|412"):
        boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=b"{}", IfNoneMatch="*")


@pytest.mark.parametrize("store", ["local", "s3"])
def test_a_fenced_driver_cannot_record_a_decision(tmp_path, request, store: str) -> None:
    """Driver A owns the checkpoint, stalls, and driver B takes over: A's late decision is
    refused (FencedError), counts as no decision, and B records its own for the batch."""
    loc = str(tmp_path / "ck") if store == "local" else request.getfixturevalue("s3_location")
    a = CommitLedger(loc)
    assert a.claim(_DRIVER_A) == 1
    assert a.claim(_DRIVER_A) == 1  # the same driver keeps its epoch
    b = CommitLedger(loc)
    assert b.claim(_DRIVER_B) == 2
    with pytest.raises(FencedError, match="epoch 2"):
        a.record_decision(_decision(7, tag="a"))
    assert b.decision(7) is None and b.state(7) is BatchState.UNDECIDED and b.pending() == []
    mine = b.record_decision(_decision(7, tag="b"))
    assert CommitLedger(loc).decision(7) == mine and mine.epoch == 2
    assert a.fenced() and not b.fenced()


@pytest.mark.parametrize("store", ["local", "s3"])
def test_a_decision_recorded_before_the_takeover_stands(tmp_path, request, store: str) -> None:
    loc = str(tmp_path / "ck") if store == "local" else request.getfixturevalue("s3_location")
    a = CommitLedger(loc)
    a.claim(_DRIVER_A)
    decided = a.record_decision(_decision(8, tag="a"))
    b = CommitLedger(loc)
    b.claim(_DRIVER_B)
    assert [d.txn_ids for d in b.pending()] == [decided.txn_ids]  # the new owner finishes it
    assert b.record_decision(_decision(8, tag="a")).txn_ids == decided.txn_ids
    with pytest.raises(ProtocolError, match="different decision"):
        b.record_decision(_decision(8, tag="b"))


def test_a_zombie_decision_written_after_the_takeover_is_void(tmp_path) -> None:
    """The race the fence closes: A creates its decision after B took over (and B's
    recovery may have rolled A's transactions back). A is told it was fenced; for everyone
    else the decision does not exist, and B's own decision replaces it."""
    loc = str(tmp_path / "ck")
    a = CommitLedger(loc)
    a.claim(_DRIVER_A)
    b = CommitLedger(loc)
    b.claim(_DRIVER_B)
    with pytest.raises(FencedError):
        a.record_decision(_decision(9, tag="a"))
    assert os.path.exists(tmp_path / "ck" / "twopc" / "decisions" / f"{9:020d}.json")  # written, but void
    c = CommitLedger(loc)
    c.claim(DriverIdentity(host="driver-c", pid=303, started=3))
    assert c.decision(9) is None and c.pending() == []
    assert c.record_decision(_decision(9, tag="c")).epoch == 3


def test_an_s3_checkpoint_spark_cannot_write_is_named_before_start_with_what_to_add(
        spark, s3_location: str, tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    """Spark writes a streaming query's own checkpoint through Hadoop, which has no S3 file
    system without hadoop-aws: ``start()`` fails inside Spark, before the sink is asked for
    its writer. ``twopc.check_checkpoint_location`` says so beforehand (the location, what
    to add), :func:`twopc.register` warns of a session default on S3, and nothing reaches
    the bucket."""
    import boto3

    import twopc
    from twopc import sinks

    def stream() -> Any:
        return (spark.readStream.format("rate").load().writeStream.format("twopc-file")
                .option("path", str(tmp_path / "out")).option("checkpointLocation", s3_location))

    sinks.register_all(spark)
    with pytest.raises(Exception, match=r"CANNOT_LOAD_CHECKPOINT_FILE_MANAGER|No FileSystem for scheme"):
        stream().start()  # Spark's own words: what the check below explains
    for location in (s3_location, s3_location.replace("s3a://", "s3://")):
        with pytest.raises(ConfigurationError, match=r"Spark cannot keep a streaming query's checkpoint at "
                                                     rf"{location}: .*hadoop-aws.*spark\.jars\.packages="
                                                     r"org\.apache\.hadoop:hadoop-aws:\d") as err:
            twopc.check_checkpoint_location(spark, location)
        assert ("fs.s3.impl=org.apache.hadoop.fs.s3a.S3AFileSystem" in str(err.value)) == location.startswith("s3://")
    twopc.check_checkpoint_location(spark, str(tmp_path / "ck"))  # a local path passes

    root = s3_location.rsplit("/", 1)[0]
    spark.conf.set("spark.sql.streaming.checkpointLocation", root)
    try:
        with caplog.at_level("WARNING", logger="twopc.spark"):
            sinks.register_all(spark)
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
        sinks.register_all(spark)
    assert any(r.levelname == "WARNING" and f"checkpoint at {root}" in r.getMessage() and "hadoop-aws" in
               r.getMessage() for r in caplog.records), caplog.text
    bucket, _, prefix = root.removeprefix("s3a://").partition("/")
    assert boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix).get("KeyCount") == 0
