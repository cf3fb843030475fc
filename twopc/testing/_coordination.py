"""The coordinator checks: :class:`twopc.CommitCoordinator` and :class:`twopc.RecoveryCoordinator` driving the sink,
with the driver dying (an in-process ``raise`` fault) at each of its protocol edges."""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from contextlib import nullcontext

from twopc import faultinject

from .._coordinator import CommitCoordinator
from .._errors import TransactionLostError
from ..ledger._ledger import CommitLedger
from ..ledger._ledger_records import BatchState
from ..operations._recovery import RecoveryCoordinator
from ._harness import SinkHarness
from ._run import CheckRun, few

__all__ = ["COORDINATOR_CHECKS", "DRIVER_CRASH_POINTS", "check_coordinator_commits_sweeps_and_ignores_replays",
           "check_driver_crash_then_recovery_is_exactly_once", "check_lost_transaction_is_loud"]

#: Where :func:`check_driver_crash_then_recovery_is_exactly_once` kills the driver.
DRIVER_CRASH_POINTS = ("before_decision", "after_decision", "between_commits", "after_commit", "after_mark",
                       "during_recovery")


def check_coordinator_commits_sweeps_and_ignores_replays(harness: SinkHarness) -> None:
    """Guarantees, with the real coordinator: a batch commits exactly once and an attempt whose handle never reached
    the driver (a failed or speculative task) is rolled back; Spark's replay of a committed batch is ignored; an
    aborted batch (``None`` for the failed task) leaves nothing, its failed attempt included; another sink id's
    transactions are untouched."""
    with tempfile.TemporaryDirectory(prefix="twopc-kit-") as tmp, \
            CheckRun(harness, "coordinator_commits_sweeps_and_ignores_replays") as run:
        sid, other = run.sink_id(), run.sink_id()
        ledger = CommitLedger(os.path.join(tmp, "ck"))
        coord = CommitCoordinator(run.sink, ledger, sid)
        p0, p1 = run.ids(3), run.ids(3)
        handles = [run.prepare(sid, 0, 0, p0), run.prepare(sid, 0, 1, p1)]
        orphan = run.prepare(sid, 0, 1, run.ids(2))
        foreign = run.prepare(other, 0, 0, run.ids(2))
        result = coord.commit_batch(0, handles)
        if result.action != "committed":
            run.fail(f"the first commit of batch 0 ended as {result.action!r}")
        run.expect_visible(p0 + p1, "after the coordinator committed batch 0")
        if orphan.txn_id in run.listed(sid):
            run.fail(f"the orphaned attempt {orphan.txn_id!r} is still prepared after the batch committed")
        replay = run.prepare(sid, 0, 0, p0 + p1)
        result = coord.commit_batch(0, [replay])
        if result.action != "replay-ignored":
            run.fail(f"Spark's replay of committed batch 0 ended as {result.action!r}, not 'replay-ignored'")
        run.expect_visible(p0 + p1, "after Spark replayed the committed batch")
        ok = run.prepare(sid, 1, 0, run.ids(3))
        run.prepare(sid, 1, 1, run.ids(3))  # its task failed after preparing: Spark sends None
        coord.abort_batch(1, [ok, None])
        if run.listed(sid):
            run.fail(f"abort_batch(1) left {few(run.listed(sid))} prepared")
        if ledger.state(1) is not BatchState.UNDECIDED:
            run.fail(f"aborted batch 1 is {ledger.state(1).name} in the ledger")
        run.expect_visible(p0 + p1, "after batch 1 was aborted")
        if set(run.listed(other)) != {foreign.txn_id}:
            run.fail(f"another sink id's prepared transaction {foreign.txn_id!r} was touched by this sink "
                     f"id's commits and sweeps")
        run.sink.abort(foreign)


def check_driver_crash_then_recovery_is_exactly_once(harness: SinkHarness, point: str) -> None:
    """Guarantees: the driver dying at *point* while committing a batch (with an orphaned attempt beside it), then a
    restart (recovery from the ledger, with a sink built from the options alone), then Spark's replay of the batch
    partitioned differently, leaves every row visible exactly once, nothing prepared and nothing pending. Recovery
    shows nothing before the decision and the whole batch after it, never a part. ``during_recovery`` crashes at
    ``after_decision`` and again inside the restart's recovery. A point the sink's commit path never reaches
    (``between_commits`` and ``after_commit`` for sinks that commit a batch atomically, ``between_commits`` for sinks
    that commit a decided batch in one call) is a crash after the batch committed."""
    if point not in DRIVER_CRASH_POINTS:
        raise ValueError(f"point must be one of {DRIVER_CRASH_POINTS}, got {point!r}")
    with tempfile.TemporaryDirectory(prefix="twopc-kit-") as tmp, \
            CheckRun(harness, f"driver_crash_then_recovery_is_exactly_once[{point}]") as run:
        sid = run.sink_id()
        ck = os.path.join(tmp, "ck")
        parts = [run.ids(3) for _ in range(3)]
        everything = [i for p in parts for i in p]
        handles = [run.prepare(sid, 0, p, ids) for p, ids in enumerate(parts)]
        run.prepare(sid, 0, 1, run.ids(2))  # an attempt that never reached the driver
        crash_at = "after_decision" if point == "during_recovery" else point
        def driver(what: str, step: Callable[[], object], fault: str | None = None) -> None:
            try:
                with faultinject.armed(fault, os.path.join(tmp, f"faults-{what}")) if fault else nullcontext():
                    step()
            except faultinject.InjectedFault:
                pass
            except TransactionLostError as exc:
                run.fail(f"{what} raised TransactionLostError (crash at {point}): transactions the sink had "
                         f"prepared or committed were reported lost: {exc}")
        driver("the first commit", lambda: CommitCoordinator(run.sink, CommitLedger(ck), sid).commit_batch(
            0, handles), f"{crash_at}@batch=0:raise")
        restarted = run.new_sink()
        if point == "during_recovery":
            driver("the restart's recovery", RecoveryCoordinator(restarted, CommitLedger(ck), sink_id=sid).run,
                   "during_recovery:raise")
            restarted = run.new_sink()
        driver("recovery", RecoveryCoordinator(restarted, CommitLedger(ck), sink_id=sid).run)
        if run.listed(sid, sink=restarted):
            run.fail(f"recovery left {few(run.listed(sid, sink=restarted))} prepared")
        run.expect_visible([] if point == "before_decision" else everything, f"after recovery from a crash at {point}")
        ledger = CommitLedger(ck)
        replay = [run.prepare(sid, 0, 0, everything[:4], sink=restarted),
                  run.prepare(sid, 0, 1, everything[4:], sink=restarted)]
        driver("the replay's commit", lambda: CommitCoordinator(restarted, ledger, sid).commit_batch(0, replay))
        run.expect_visible(everything, f"after Spark replayed the batch (crash at {point})")
        if ledger.state(0) is not BatchState.COMMITTED or ledger.pending():
            run.fail(f"after the replay batch 0 is {ledger.state(0).name}, pending {ledger.pending()}")
        report = RecoveryCoordinator(run.new_sink(), CommitLedger(ck), sink_id=sid).run()
        if report.changed_anything:
            run.fail(f"a second recovery still found work: {report.summary()}")


def check_lost_transaction_is_loud(harness: SinkHarness) -> None:
    """Guarantees: when a transaction of a batch is rolled back behind the coordinator's back (an operator, a server
    that lost it), committing the batch raises ``TransactionLostError``, the batch is never marked committed, and if
    the decision was recorded, every later recovery raises again."""
    with tempfile.TemporaryDirectory(prefix="twopc-kit-") as tmp, \
            CheckRun(harness, "lost_transaction_is_loud") as run:
        sid = run.sink_id()
        ck = os.path.join(tmp, "ck")
        h = run.prepare(sid, 0, 0, run.ids(4))
        run.sink.abort(h)
        try:
            result = CommitCoordinator(run.sink, CommitLedger(ck), sid).commit_batch(0, [h])
        except TransactionLostError as exc:
            run.clean(str(exc), "the TransactionLostError message")
        else:
            run.fail(f"committing a batch whose transaction was rolled back returned quietly "
                     f"({result.action}, {result.committed} committed, {result.already_committed} already "
                     f"committed): lost rows must raise TransactionLostError")
        state = CommitLedger(ck).state(0)
        if state is BatchState.COMMITTED:
            run.fail("the batch with a lost transaction was marked committed in the ledger")
        if state is BatchState.DECIDED:
            for _ in range(2):
                try:
                    RecoveryCoordinator(run.new_sink(), CommitLedger(ck), sink_id=sid).run()
                except TransactionLostError:
                    continue
                run.fail("recovery of a decided batch with a lost transaction returned quietly")
            if CommitLedger(ck).state(0) is not BatchState.DECIDED:
                run.fail("recovery marked the batch with a lost transaction as committed")
        run.expect_visible([], "after the lost batch")


COORDINATOR_CHECKS: dict[str, Callable[[SinkHarness], None]] = {
    "coordinator_commits_sweeps_and_ignores_replays": check_coordinator_commits_sweeps_and_ignores_replays,
    **{f"driver_crash_then_recovery_is_exactly_once[{p}]":
       functools.partial(check_driver_crash_then_recovery_is_exactly_once, point=p)
       for p in DRIVER_CRASH_POINTS},
    "lost_transaction_is_loud": check_lost_transaction_is_loud,
}
"""Every coordinator check by name (the crash check once per point)."""
