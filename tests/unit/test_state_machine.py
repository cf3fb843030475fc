"""A Hypothesis state machine drives the coordinator, ledger and recovery through random
writes, commits, replays, failed tasks, driver crashes at every protocol edge and
recoveries, against a model of what Spark has seen. After every step: no effect doubled,
no batch both committed and rolled back; at the end, after recovery and replay, nothing
is lost.

It runs against the real file sink (files, renames and fsyncs on disk).
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
from contextlib import nullcontext
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from twopc import CommitCoordinator, CommitLedger, RecoveryCoordinator, faultinject
from twopc.sinks import FileHandle, FileSink
from twopc.spi.operations import BatchState

from tests._filesink_helpers import committed_ids, run_task

SINK = "sm"
ROWS_PER_BATCH = 5
CRASH_POINTS = ["before_decision", "after_decision", "between_commits", "after_commit", "after_mark"]


def batch_ids(batch: int) -> list[int]:
    return [batch * 100 + i for i in range(ROWS_PER_BATCH)]


class ExactlyOnceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="twopc-sm-"))
        self.sink = FileSink(str(self.dir / "out"))
        self.fault_state = self.dir / "faults"
        self.attempt = 0
        self.current = 0           # the batch Spark is on (offsets/<current> written)
        self.handles: list[FileHandle | None] = []
        self.spark_committed: set[int] = set()
        self.needs_recovery = False
        self._new_driver()

    def _new_driver(self) -> None:
        self.ledger = CommitLedger(str(self.dir / "ck"))
        self.coord = CommitCoordinator(self.sink, self.ledger, SINK, keep_last=3)

    def _next_attempt(self) -> int:
        self.attempt += 1
        return self.attempt

    # -- what Spark does ------------------------------------------------------------
    @precondition(lambda self: not self.needs_recovery)
    @rule(cuts=st.lists(st.integers(1, ROWS_PER_BATCH - 1), max_size=2, unique=True),
          orphans=st.integers(0, 2))
    def run_tasks(self, cuts: list[int], orphans: int) -> None:
        """Tasks of the current batch: a random partitioning, plus attempts that prepared
        and then died (their handles never reach the driver)."""
        ids = batch_ids(self.current)
        bounds = [0, *sorted(cuts), len(ids)]
        self.handles = [run_task(self.sink, SINK, self.current, p, self._next_attempt(), ids[a:b])
                        for p, (a, b) in enumerate(itertools.pairwise(bounds))]
        for p in range(orphans):
            run_task(self.sink, SINK, self.current, p, self._next_attempt(), ids[:1])

    @precondition(lambda self: not self.needs_recovery and self.handles)
    @rule(crash=st.one_of(st.none(), st.sampled_from(CRASH_POINTS)))
    def driver_commits(self, crash: str | None) -> None:
        """The driver commits; with *crash*, it dies at that protocol edge if the commit
        reaches it (a one-partition batch has no `between_commits`, a replay of a
        committed batch commits nothing)."""
        state = self.fault_state / str(self._next_attempt())
        armed = faultinject.armed(f"{crash}:raise", state_dir=str(state)) if crash else nullcontext()
        with armed:
            try:
                self.coord.commit_batch(self.current, self.handles)
            except faultinject.InjectedFault:
                self._driver_crashed()
                return
        self.spark_committed.add(self.current)   # Spark writes commits/<batch>
        self.current += 1
        self.handles = []

    @precondition(lambda self: not self.needs_recovery and self.handles)
    @rule(failed=st.integers(0, 2))
    def write_job_fails(self, failed: int) -> None:
        """Some task failed for good: Spark aborts with None in failed slots, and the query
        stops; it will be restarted."""
        slots = [None if i < failed else h for i, h in enumerate(self.handles)]
        self.coord.abort_batch(self.current, slots)
        self._driver_crashed()

    @precondition(lambda self: not self.needs_recovery)
    @rule()
    def driver_crashes_between_batches(self) -> None:
        self._driver_crashed()

    def _driver_crashed(self) -> None:
        self.handles = []
        self.needs_recovery = True

    @precondition(lambda self: self.needs_recovery)
    @rule(crash_in_recovery=st.booleans())
    def restart(self, crash_in_recovery: bool) -> None:
        """Query restart: recovery runs before any task; Spark will replay `current`."""
        self._new_driver()
        if crash_in_recovery and self.ledger.pending():
            state = self.fault_state / str(self._next_attempt())
            with (faultinject.armed("during_recovery:raise", state_dir=str(state)),
                  contextlib.suppress(faultinject.InjectedFault)):
                RecoveryCoordinator(self.sink, self.ledger, sink_id=SINK).run()
            self._new_driver()
        RecoveryCoordinator(self.sink, self.ledger, sink_id=SINK).run()
        assert self.sink.list_prepared(SINK) == [], "recovery left prepared transactions"
        self.needs_recovery = False

    # -- properties -----------------------------------------------------------------
    @invariant()
    def no_effect_is_doubled(self) -> None:
        ids = committed_ids(self.sink)
        assert len(ids) == len(set(ids)), f"duplicates: {sorted(i for i in set(ids) if ids.count(i) > 1)}"

    @invariant()
    def only_ids_of_started_batches_are_visible(self) -> None:
        started = {i for b in range(self.current + 1) for i in batch_ids(b)}
        assert set(committed_ids(self.sink)) <= started

    @invariant()
    def what_spark_saw_committed_is_visible(self) -> None:
        visible = set(committed_ids(self.sink))
        for b in self.spark_committed:
            assert set(batch_ids(b)) <= visible, f"batch {b} acknowledged but missing rows"

    @invariant()
    def no_batch_is_both_committed_and_rolled_back(self) -> None:
        """A batch with visible rows was decided; a decided batch is never partly aborted
        once finished: its rows are all there or the decision is still pending."""
        visible = set(committed_ids(self.sink))
        marks = set(self.ledger.committed_batches())
        for b in range(self.current + 1):
            seen = set(batch_ids(b)) & visible
            purged = b in self.spark_committed and b not in marks and self.ledger.decision(b) is None
            if seen and not purged:
                assert self.ledger.state(b) is not BatchState.UNDECIDED, f"batch {b} visible but undecided"
            if self.ledger.state(b) is BatchState.COMMITTED:
                assert seen == set(batch_ids(b)), f"batch {b} marked committed but partial"

    def teardown(self) -> None:
        try:
            if self.needs_recovery:
                self.restart(crash_in_recovery=False)
            # Let the query run the current batch to the end: nothing may be lost.
            self.run_tasks([], 0)
            self.coord.commit_batch(self.current, self.handles)
            expected = sorted(i for b in range(self.current + 1) for i in batch_ids(b))
            assert committed_ids(self.sink) == expected, "lost or doubled rows after recovery"
            assert self.sink.list_prepared(SINK) == []
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


ExactlyOnceMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestExactlyOnce = ExactlyOnceMachine.TestCase
