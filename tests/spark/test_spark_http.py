"""twopc-http through Spark, against the reference service (tests/_http_service.py):

- a streaming query whose outboxes live under its checkpoint (no ``outbox`` option) and a
  ``twopc-composite`` with a file participant and an HTTP participant, each row applied once;
- the one Spark crash test of ``make test`` for this sink: a Python worker killed after its
  prepare, the whole job killed after a decision and again in mid-delivery (``http_before_ack``),
  restarted from its checkpoint with another partitioning; then every row applied exactly once
  and no request of an undecided transaction, from the service's own log. The kit's full crash
  matrix through Spark runs ``nightly`` (the JVM-less one at every fault point runs in
  tests/chaos/test_http_chaos.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from twopc import CommitLedger, sinks
from twopc.recovery.demos.demo import INPUT_SCHEMA, write_input
from twopc.sinks import FileSink
from twopc.testing import CrashMatrixResult, CrashMatrixTests, Fault, SinkHarness

from tests._filesink_helpers import committed_ids
from tests._http_service import HttpService, undecided_requests
from tests._kit_harnesses import http_harness


@pytest.fixture(scope="module", autouse=True)
def _registered(spark: Any) -> None:
    sinks.register_all(spark)


@pytest.fixture
def service() -> Iterator[HttpService]:
    with HttpService() as s:
        yield s


def _stream(spark: Any, folder: Path, fmt: str, ck: Path, **options: str) -> None:
    q = (spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(folder))
         .writeStream.format(fmt).options(**options).option("checkpointLocation", str(ck))
         .trigger(availableNow=True).start())
    q.awaitTermination()


def test_a_streaming_query_keeps_its_outboxes_in_its_checkpoint(spark: Any, service: HttpService,
                                                                tmp_path: Path) -> None:
    ids = write_input(tmp_path / "in", 3, 10)
    ck = tmp_path / "ck"
    _stream(spark, tmp_path / "in", "twopc-http", ck, url=f"{service.url}/events/{{id}}", keyColumn="id",
            transactionHeader="Twopc-Transaction")
    assert Counter(service.ids()) == Counter(ids)
    assert undecided_requests(service, str(ck)) == []
    assert (ck / "twopc-http" / "delivered").is_dir() and list((ck / "twopc-http" / "outbox").iterdir()) == []
    record = CommitLedger(str(ck)).target_record()
    assert record is not None and dict(record.options or {})["outbox"] == f"{ck}/twopc-http"  # for twopc recover


def test_an_http_participant_of_a_composite(spark: Any, service: HttpService, tmp_path: Path) -> None:
    ids = write_input(tmp_path / "in", 2, 8)
    ck, out = tmp_path / "ck", tmp_path / "files"
    _stream(spark, tmp_path / "in", "twopc-composite", ck, targets="files,notify",
            **{"files.format": "twopc-file", "files.path": str(out), "notify.format": "twopc-http",
               "notify.url": f"{service.url}/notify/{{id}}", "notify.columns": "id, payload"})
    assert committed_ids(FileSink(str(out))) == ids
    assert Counter(service.ids()) == Counter(ids)
    assert len(list((ck / "twopc-http" / "delivered").iterdir())) >= 2


class TestHttpThroughSparkCrashes(CrashMatrixTests):
    """A worker killed after its prepare, the job killed after a decision and in mid-delivery."""

    crash_plan = (Fault("after_pre_commit", 0, "kill", 0), Fault("after_decision", 1),
                  Fault("http_before_ack", 2))
    rows_per_batch = 12

    @pytest.fixture
    def harness(self, tmp_path: Path) -> Iterator[SinkHarness]:
        with http_harness(tmp_path) as harness:
            yield harness

    def run_matrix(self, harness: SinkHarness, tmp_path: Path) -> CrashMatrixResult:
        result = super().run_matrix(harness, tmp_path / "matrix")
        service = harness.read_ids.__self__  # type: ignore[attr-defined]  # the bound HttpService.ids
        assert isinstance(service, HttpService)
        assert undecided_requests(service, result.checkpoint) == []
        assert max(service.applied.values()) == 1
        return result


@pytest.mark.nightly
class TestHttpCrashMatrix(CrashMatrixTests):
    """The kit's whole crash matrix through Spark, plus twopc-http's own two fault points."""

    crash_plan = (*[Fault(p, b) for b, p in enumerate(
        ("during_invoke", "before_pre_commit", "after_pre_commit", "before_decision", "after_decision",
         "http_before_ack", "between_commits", "http_before_delivered", "after_commit", "after_mark"))],
        Fault("during_invoke", 10, "kill", 0), Fault("after_pre_commit", 10, "kill", 1))

    @pytest.fixture
    def harness(self, tmp_path: Path) -> Iterator[SinkHarness]:
        with http_harness(tmp_path) as harness:
            yield harness
