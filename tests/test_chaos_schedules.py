"""The randomized chaos suite: seeded schedules of process crashes, worker kills, server
crashes and restarts (PostgreSQL immediate shutdown, MariaDB and Redis SIGKILL, Redis back
from its AOF) and network faults (FaultProxy resets, stalls, latency, swallowed commit
replies) at every fault point of ``twopc.FAULT_POINTS``, over five sinks (twopc-postgres
prepared, MariaDB XA, twopc-jdbc staging on PostgreSQL, twopc-redis, the file sink), each
followed by the model check of :func:`twopc.testing.run_schedule`.

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

from twopc.testing import ChaosTable, Schedule, ScheduleResult, generate_schedule, run_schedule, shrink_schedule

from ._chaos_env import ChaosEnv, Knobs, chaos_env

pytestmark = pytest.mark.chaos

BROKEN_COORDINATOR = "tests._broken_coordinator:CommitsBeforeDecision"


def _run(env: ChaosEnv, knobs: Knobs, schedule: Schedule, work: Path) -> ScheduleResult:
    result = run_schedule(env.harnesses[schedule.sink], schedule, work, env=env.control.env(),
                          settle=env.settle,
                          coordinator=BROKEN_COORDINATOR if knobs.broken == "coordinator" else None)
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
            table.add(result)
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
