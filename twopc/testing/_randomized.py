"""One randomized schedule against one sink, then the model check; and the table of a run."""

from __future__ import annotations

import collections
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..ledger._ledger import CommitLedger
from ._crash import _python_path, _write_input, left_prepared, not_exactly_once, run_job
from ._harness import SinkHarness
from ._run import ID_RANGE, few
from ._schedules import Schedule

__all__ = ["ChaosTable", "ScheduleResult", "run_schedule"]

_KIND = re.compile(r"faultinject: firing \S+ \(([a-z_.]+)\)")


@dataclass
class ScheduleResult:
    """What one schedule did and what the model check found (all 0 and no ``hang`` when it held)."""

    schedule: Schedule
    seconds: float = 0.0
    rows: int = 0
    restarts: int = 0
    fired: collections.Counter[str] = field(default_factory=collections.Counter)
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    dangling: int = 0
    stale: int = 0
    unsettled: int = 0
    hang: bool = False
    incomplete: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        verdict = "ok" if self.ok else "FAILED: " + "; ".join(self.problems)
        fired = ", ".join(f"{k} x{n}" for k, n in sorted(self.fired.items())) or "none fired"
        return (f"{self.schedule.describe()} -> {self.restarts} restart(s), {self.seconds:.1f}s, "
                f"faults: {fired}; {verdict}")


def run_schedule(harness: SinkHarness, schedule: Schedule, workdir: str | os.PathLike[str], *,
                 env: Mapping[str, str] | None = None, settle: Callable[[], None] | None = None,
                 rows_per_batch: int = 8, partitions: Sequence[int] = (2, 3),
                 hang_after_s: float = 240.0, coordinator: str | None = None) -> ScheduleResult:
    """Run *schedule* against *harness*'s sink in *workdir* (an empty folder) and check the model.

    The job is ``python -m twopc.testing.microjob`` under :class:`twopc.faultinject.ChaosRunner`,
    restarted after every abnormal end; *env* adds to its environment (a
    :class:`twopc.faultinject.FaultControl`'s ``env()``); *settle* runs before the check
    (``FaultControl.settle``). A job running past *hang_after_s* is killed and reported as a hang.
    *coordinator* (``module:Class``) replaces twopc's, to prove the check catches a broken one.

    The model: every input id visible exactly once; nothing prepared and ``verify`` passes; every batch committed,
    nothing pending; the job completed without hanging. Never raises for a broken model: the result lists what broke."""
    work = Path(workdir)
    base = (secrets.randbelow(2**30) + 1) * ID_RANGE  # as CheckRun: no two schedules share a target's ids
    ids = _write_input(work / "in", harness, schedule.batches, rows_per_batch, base)
    ck = work / "ck"
    job_env = {**os.environ, "PYTHONPATH": _python_path(), **(env or {})}
    result = ScheduleResult(schedule, rows=len(ids))
    started = time.monotonic()
    report = run_job(harness, work, "twopc.testing.microjob", schedule.plan, env=job_env, partitions=partitions,
                     tail_lines=60, extra={"coordinator": coordinator},
                     max_restarts=2 * len(schedule.rules) + 4, timeout_s=hang_after_s)
    result.seconds = time.monotonic() - started
    result.restarts = len(report.runs) - 1
    result.fired.update(m.group(1) for line in report.fired if (m := _KIND.search(line)))
    if settle is not None:
        settle()
    result.hang = report.runs[-1].timed_out
    result.incomplete = not report.completed and not result.hang
    if result.hang:
        result.problems.append(f"hang: still running after {hang_after_s:.0f}s")
    elif result.incomplete:
        tail = report.runs[-1].stderr_tail.splitlines()[-3:]
        result.problems.append(f"the job did not complete in {len(report.runs)} runs; last: "
                               f"{report.runs[-1].describe()}: {' | '.join(tail)[:600]}")
    _check_model(harness, result, ids, base, ck, schedule.batches)
    return result


def _check_model(harness: SinkHarness, result: ScheduleResult, ids: list[int], base: int, ck: Path,
                 batches: int) -> None:
    lost, dup, extra = not_exactly_once(harness, set(ids), base, base + ID_RANGE)
    result.lost, result.duplicated, result.unexpected = len(lost), len(dup), len(extra)
    if lost or dup or extra:
        result.problems.append(f"not exactly once: lost {few(lost)}, duplicated {few(dup)}, never written "
                               f"{few(extra)}")
    ledger = CommitLedger(str(ck))
    if (sink_id := ledger.recorded_sink_id()) is None:
        result.problems.append("the ledger names no sink id: the job never got to plan time")
        return
    left = left_prepared(harness, sink_id)
    result.dangling = len(left)
    if left:
        result.problems.append(f"{len(left)} transaction(s) left prepared: {few(h.txn_id for h in left)}")
    if harness.verify is not None:
        try:
            harness.verify(sink_id)
        except AssertionError as exc:
            result.stale = 1
            result.problems.append(f"leftovers: {exc}")
    pending = [d.batch_id for d in ledger.pending()]
    missing = sorted(set(range(batches)) - set(ledger.committed_batches()))
    result.unsettled = len(set(pending) | set(missing))
    if pending or missing:
        result.problems.append(f"ledger not settled: pending {pending}, not committed {missing}")


class ChaosTable:
    """A chaos run's report: totals per sink and in all (schedules, faults by kind, restarts, rows,
    lost, duplicated, dangling, stale, hangs, failed)."""

    COLUMNS = ("schedules", "restarts", "rows", "lost", "duplicated", "dangling", "stale", "unsettled", "hangs",
               "failed")

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.results: list[ScheduleResult] = []
        self.started = time.monotonic()
        self.note = ""  # a line under the title

    @property
    def failures(self) -> list[ScheduleResult]:
        return [r for r in self.results if not r.ok]

    def _row(self, results: Sequence[ScheduleResult]) -> list[int]:
        return [len(results), sum(r.restarts for r in results), sum(r.rows for r in results),
                sum(r.lost for r in results), sum(r.duplicated + r.unexpected for r in results),
                sum(r.dangling for r in results), sum(r.stale for r in results),
                sum(r.unsettled for r in results), sum(r.hang for r in results), sum(not r.ok for r in results)]

    def render(self) -> str:
        """The table as text."""
        sinks = sorted({r.schedule.sink for r in self.results})
        rows = [(s, self._row([r for r in self.results if r.schedule.sink == s])) for s in sinks]
        rows.append(("all", self._row(self.results)))
        width = max([len(n) for n, _ in rows] + [4])
        head = "sink".ljust(width) + "".join(c.rjust(11) for c in self.COLUMNS)
        title = (f"twopc chaos: seed {self.seed}, {len(self.results)} schedule(s) in "
                 f"{time.monotonic() - self.started:.0f}s")
        lines = [title, *([self.note] if self.note else []), head, "-" * len(head)]
        lines += [n.ljust(width) + "".join(str(v).rjust(11) for v in vals) for n, vals in rows]
        fired = sum((r.fired for r in self.results), collections.Counter[str]())
        scheduled: collections.Counter[str] = collections.Counter(
            rule.kind for r in self.results for rule in r.schedule.rules)
        lines.append("faults fired by kind (scheduled): " + ", ".join(
            f"{k} {fired[k]} ({scheduled[k]})" for k in sorted(scheduled | fired)))
        lines += [f"FAILED {r.summary()}" for r in self.failures]
        return "\n".join(lines)
