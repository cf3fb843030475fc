"""The randomized chaos suite: seeded schedules of process crashes, worker kills, server
crashes and restarts (PostgreSQL immediate shutdown, MariaDB and Redis SIGKILL, Redis back
from its AOF) and network faults (FaultProxy resets, stalls, latency, swallowed commit
replies) at every fault point of ``twopc.testing.FAULT_POINTS``, over six sinks (twopc-postgres
prepared, MariaDB XA, twopc-jdbc staging on PostgreSQL, twopc-redis, the file sink, twopc-http
against the reference service, with its own two fault points), each followed by the model check
of :func:`twopc.testing.run_schedule`; for twopc-http also the service's log: no request of a
transaction that no decision names.

``make test`` runs 30 schedules with a seed from the clock; the table (and, on a failure,
the shrunk schedule and the one command that reruns it) is printed and written to a file.
``make chaos N=500`` runs more; ``make chaos SEED=... N=1`` reruns one schedule. See
tests/_chaos_env.py for the knobs.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from twopc.faultinject import FaultPlan
from twopc.testing import (
    FAULT_KINDS,
    FAULT_POINTS,
    ChaosTable,
    Schedule,
    ScheduleResult,
    generate_schedule,
    run_schedule,
    shrink_schedule,
)

from tests import _broken_sinks as broken
from tests._chaos_env import HTTP_POINTS, TARGETS, ChaosEnv, Knobs, chaos_env
from tests._http_service import undecided_requests
from tests._kit_harnesses import file_harness

pytestmark = pytest.mark.chaos

BROKEN_COORDINATOR = "tests._broken_coordinator:CommitsBeforeDecision"


def _run(env: ChaosEnv, knobs: Knobs, schedule: Schedule, work: Path) -> ScheduleResult:
    result = run_schedule(env.harnesses[schedule.sink], schedule, work, env=env.control.env(),
                          settle=env.settle,
                          coordinator=BROKEN_COORDINATOR if knobs.broken == "coordinator" else None)
    if schedule.sink == "http" and env.http is not None and (work / "ck" / "twopc").exists():
        sent = undecided_requests(env.http, str(work / "ck"))
        if sent:
            txns = sorted({s.txn or "" for s in sent})
            result.problems.append(f"the service saw {len(sent)} request(s) of transactions no decision names: "
                                   f"{txns[:3]}")
    if result.ok:
        shutil.rmtree(work, ignore_errors=True)
    return result


def _brief(result: ScheduleResult) -> str:
    return (f"seed {result.schedule.seed} {result.schedule.sink}: ok, {len(result.schedule.rules)} rule(s), "
            f"{sum(result.fired.values())} fired, {result.restarts} restart(s), {result.seconds:.0f}s")


def test_randomized_schedules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    knobs = Knobs.from_env()
    table = ChaosTable(knobs.seed)
    with chaos_env(knobs, tmp_path / "world") as env:
        with capsys.disabled():
            print(f"\ntwopc chaos: seed {knobs.seed}, {knobs.n} schedule(s); one schedule again: "
                  f"{knobs.reproduce(knobs.seed)} (its seed)", flush=True)
        deadline = time.monotonic() + knobs.minutes * 60 if knobs.minutes else None
        for k in range(knobs.n):
            if deadline is not None and time.monotonic() > deadline:
                table.note = f"stopped at the time budget ({knobs.minutes:g} min): {k} of {knobs.n} schedules ran"
                break
            schedule = generate_schedule(knobs.seed + k, env.targets)
            result = _run(env, knobs, schedule, tmp_path / f"s{k}")
            table.results.append(result)
            Path(knobs.report).write_text(table.render() + "\n", encoding="utf-8")  # complete if the run is stopped
            with capsys.disabled():
                print(f"  [{k + 1}/{knobs.n}] {result.summary() if not result.ok else _brief(result)}", flush=True)
        text = table.render()
        Path(knobs.report).write_text(text + "\n", encoding="utf-8")
        with capsys.disabled():
            print(f"{text}\n(written to {knobs.report})", flush=True)
        failures = table.failures
        if not failures:
            return
        first = failures[0].schedule
        minimal = first
        if knobs.shrink:
            tries = iter(range(1000))
            minimal = shrink_schedule(first, lambda s: not _run(env, knobs, s, tmp_path / f"shrink{next(tries)}").ok)
    lines = [f"{len(failures)} of {len(table.results)} schedule(s) broke the model (seed {knobs.seed}):"]
    lines += [f"  {r.summary()}  -> rerun: {knobs.reproduce(r.schedule.seed)}" for r in failures[:10]]
    if minimal is not first:
        lines.append(f"shrunk: {minimal.describe()}")
    pytest.fail("\n".join(lines), pytrace=False)


# -- the suite can fail: the shrunk schedules that caught the broken pieces, and the generator --

def test_the_schedules_catch_a_coordinator_that_commits_before_its_decision(tmp_path: Path) -> None:
    """What `make chaos N=30 SEED=4242 BROKEN=coordinator` shrank its first failure to: the
    driver killed twice at before_decision (which the broken coordinator reaches after its
    commits), on the file sink. The replay writes the batch again."""
    schedule = Schedule(4244, "file", 2, FaultPlan.parse("before_decision:kill*2").rules)
    with file_harness(tmp_path / "target") as harness:
        result = run_schedule(harness, schedule, tmp_path / "run", coordinator=BROKEN_COORDINATOR)
    assert result.duplicated > 0 and result.lost == 0, result.summary()
    assert not result.ok and result.fired["kill"] == 2


def test_the_schedules_catch_a_sink_whose_abort_ignores_prepared_state(tmp_path: Path) -> None:
    """The first schedule of `make chaos N=30 SEED=4242 SINKS=file BROKEN=sink`: a crash while
    a task writes; the restart's recovery aborts the other task's prepared transaction, and
    this sink's abort leaves it."""
    schedule = Schedule(4243, "file", 3, FaultPlan.parse("during_invoke:crash").rules)
    harness = broken.harness_on(broken.AbortIgnoresPreparedState, tmp_path / "target")
    result = run_schedule(harness, schedule, tmp_path / "run")
    assert result.dangling > 0 and result.stale == 1, result.summary()
    assert result.lost == result.duplicated == 0 and not result.ok


def test_schedules_are_seeded_and_cover_every_point_kind_and_sink() -> None:
    targets = list(TARGETS.values())
    assert generate_schedule(99, targets) == generate_schedule(99, targets)
    schedules = [generate_schedule(seed, targets) for seed in range(400)]
    assert {s.sink for s in schedules[:len(TARGETS)]} == set(TARGETS)  # consecutive seeds cycle through the sinks
    rules = [r for s in schedules for r in s.rules]
    assert {r.point for r in rules} == set(FAULT_POINTS) | set(HTTP_POINTS)
    assert {r.point for s in schedules if s.sink != "http" for r in s.rules} == set(FAULT_POINTS)
    assert {r.kind for r in rules} == set(FAULT_KINDS)
    assert all(r.action in ("crash", "kill") for s in schedules if s.sink == "file" for r in s.rules)
    assert all(FaultPlan.parse(s.plan.to_spec()) == s.plan for s in schedules)


def test_shrinking_drops_every_rule_the_failure_does_not_need() -> None:
    schedule = Schedule(1, "file", 3, FaultPlan.parse(
        "during_invoke:crash,before_decision:kill,after_mark:crash,after_decision:crash").rules)
    runs: list[Schedule] = []

    def fails(s: Schedule) -> bool:
        runs.append(s)
        return {"before_decision", "after_mark"} <= {r.point for r in s.rules}

    minimal = shrink_schedule(schedule, fails)
    assert [r.point for r in minimal.rules] == ["before_decision", "after_mark"]
    assert len(runs) <= 10
