"""The crash matrix over the composite sink (``twopc-composite``: a PostgreSQL table, Redis
stream + counter and the file sink as one sink), through Spark: the conformance kit's
``run_crash_matrix`` SIGKILLs the streaming job at every fault point its commit path
reaches — ``between_commits`` is the window between two participants' commits, where one
target shows a batch and the next not yet — plus two worker-only kills Spark retries,
restarting from the checkpoint with another ``repartition(n)`` each time. Afterwards every
target holds each id exactly once, the targets agree batch by batch, nothing of any
participant is left prepared or staged, and the ledger has nothing pending.

One composite through the full matrix (about ten Spark starts); the other mixes go through
a shorter Spark test in ``test_spark_composite.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from twopc.testing import CrashMatrixResult, CrashMatrixTests, SinkHarness

from tests._composite_helpers import composite_harness

pytestmark = pytest.mark.chaos


class TestCompositeCrashMatrix(CrashMatrixTests):
    @pytest.fixture
    def harness(self, postgres_url: str, redis_url: str, tmp_path: Path) -> Iterator[SinkHarness]:
        with composite_harness(["orders", "events", "files"], postgres_url=postgres_url, redis_url=redis_url,
                               tmp_path=tmp_path, rows_per_batch=self.rows_per_batch, keyed=True) as harness:
            yield harness

    def run_matrix(self, harness: SinkHarness, tmp_path: Path) -> CrashMatrixResult:
        result = super().run_matrix(harness, tmp_path / "matrix")
        folder = Path(result.checkpoint, "twopc", "decisions")
        decisions = [json.loads(f.read_text()) for f in sorted(folder.glob("*.json"))]
        kinds = {h["kind"] for d in decisions for h in d["handles"]}
        assert kinds == {"twopc.composite"}, f"decisions hold {kinds}"
        names = {name for d in decisions for h in d["handles"] for name, _part in h["payload"]["parts"]}
        assert names == {"orders", "events", "files"}, f"decisions name participants {names}"
        return result
