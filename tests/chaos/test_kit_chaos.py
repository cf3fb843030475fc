"""The conformance kit's crash matrix (``twopc.testing.run_crash_matrix``) through Spark, on
the project's six sinks: a streaming query in a subprocess is SIGKILLed at every fault
point of ``twopc.testing.FAULT_POINTS`` its commit path reaches (driver, JVM and Python workers:
no cleanup runs), restarted from its checkpoint with a different ``repartition(n)`` each
time, and two task attempts are killed (Spark retries them) in the last micro-batch. Then
every id is in the target exactly once, nothing of the sink is prepared (plus each
harness's own check: ``pg_prepared_xacts``, ``XA RECOVER``, staged rows, Redis staging and
counters), the ledger has nothing pending, and no credential reached the checkpoint or the
job's stderr.

The six: twopc-postgres, twopc-jdbc staging on PostgreSQL and twopc-redis (``make test``);
FileSink, the MariaDB XA sink and twopc-jdbc staging on SQLite (``nightly``). The SQL tables have
a primary key on the row id, as users' tables do: a replay that wrote a committed batch again,
or a retry that waited on the locks of a killed attempt's prepared transaction, fails there. A job costs
about one Spark start per crash plus one: 10 for sinks that commit per transaction, 8 for
those that commit a batch atomically (staging).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from twopc.testing import (
    ContractViolation,
    CrashMatrixResult,
    CrashMatrixTests,
    Fault,
    SinkHarness,
    run_crash_matrix,
)

from tests import _broken_sinks as broken
from tests._broken_sinks import harness_on
from tests._kit_harnesses import OwnHarness, harness_for

pytestmark = pytest.mark.chaos


class TestCrashMatrixOfOwnSinks(CrashMatrixTests):
    # make test runs the matrix on one sink per commit path (prepared, staged, one server-side
    # call); the file sink, XA on MariaDB and staging on SQLite are crashed at every fault point
    # JVM-less by the randomized schedules there, and through Spark here by make test-all.
    @pytest.fixture(params=["postgres", "staging_postgres", "redis",
                            pytest.param("file", marks=pytest.mark.nightly),
                            pytest.param("mysql_xa", marks=pytest.mark.nightly),
                            pytest.param("staging_sqlite", marks=pytest.mark.nightly)])
    def harness(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SinkHarness]:
        with harness_for(request.param, request, tmp_path, keyed=True) as harness:
            yield harness

    def run_matrix(self, harness: SinkHarness, tmp_path: Path) -> CrashMatrixResult:
        result = super().run_matrix(harness, tmp_path / "matrix")
        assert isinstance(harness, OwnHarness)
        folder = Path(result.checkpoint, "twopc", "decisions")
        kinds = {h["kind"] for f in folder.glob("*.json") for h in json.loads(f.read_text())["handles"]}
        assert kinds == {harness.handle_kind}, f"decisions hold {kinds}: the sink ran in another commit mode"
        if harness.options.get("commitMode") == "staging":
            _one_marker_per_micro_batch(harness, result)
        return result


def _one_marker_per_micro_batch(harness: SinkHarness, result: CrashMatrixResult) -> None:
    """Staging: the batch marker table has one row per micro-batch, adding up to the input."""
    assert isinstance(harness, OwnHarness) and harness.engine is not None
    with harness.engine.connect() as c:
        markers: dict[int, int] = dict(c.execute(sa.text("SELECT batch_id, rows FROM twopc_batches WHERE sink_id = :s"),
                                 {"s": result.sink_id}).all())
    assert sorted(markers) == list(range(result.batches)) and sum(markers.values()) == len(result.ids), markers


def test_the_crash_matrix_fails_a_sink_whose_commit_is_not_idempotent(tmp_path: Path) -> None:
    """A matrix that cannot fail proves nothing: crash after the commits of batch 1, before
    the ledger marks it; the restart's recovery commits again, and this sink applies the
    rows twice."""
    harness = harness_on(broken.CommitNotIdempotent, tmp_path / "out")
    with pytest.raises(ContractViolation, match=r"not exactly once: lost \[\], duplicated \[\d+"):
        run_crash_matrix(harness, tmp_path / "matrix", plan=[Fault("after_commit", 1)])
