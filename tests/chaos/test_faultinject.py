"""faultinject: spec parsing, arming, actions in real processes, ChaosRunner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from twopc import faultinject
from twopc.faultinject import (
    ChaosRunner,
    FaultPlan,
    FaultRule,
    FaultSpecError,
    InjectedFault,
    UnknownFaultPoint,
    armed,
    fault_point,
)

from tests._fault_helpers import FAULT_ENV, REPO
from tests._fault_helpers import child_env as _child_env
from tests._fault_helpers import wait_dead as _wait_dead


@pytest.fixture(autouse=True)
def _unarmed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in FAULT_ENV:
        monkeypatch.delenv(name, raising=False)


# --- spec parsing ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "rules"),
    [
        ("after_decision", [FaultRule("after_decision")]),
        ("after_decision@batch=2:crash", [FaultRule("after_decision", batch=2)]),
        ("during_invoke:kill*2", [FaultRule("during_invoke", action="kill", times=2)]),
        (
            " a@partition=1@batch=3:RAISE*3 , b:exit ",
            [FaultRule("a", batch=3, partition=1, action="raise", times=3),
             FaultRule("b", action="exit")],
        ),
        ("x.y-z@batch=0*5", [FaultRule("x.y-z", batch=0, times=5)]),
        ("", []),
    ],
)
def test_parse_good_specs(spec: str, rules: list[FaultRule]) -> None:
    plan = FaultPlan.parse(spec)
    assert list(plan.rules) == rules
    assert FaultPlan.parse(plan.to_spec()) == plan
    assert FaultPlan.from_json(plan.to_json()) == plan


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("a:boom", "'boom'"),
        ("a*0", "'0'"),
        ("a*many", "'many'"),
        ("a@batch=x", "@batch=x"),
        ("a@batch=-1", "@batch=-1"),
        ("a@shard=1", "@shard=1"),
        ("a@batch=1@batch=2", "@batch"),
        ("1abc", "'1abc'"),
        ("a,,b", "rule 2"),
        ("a:crash:kill", "'crash:kill'"),
    ],
)
def test_parse_bad_specs_name_the_problem(spec: str, named: str) -> None:
    with pytest.raises(FaultSpecError) as info:
        FaultPlan.parse(spec)
    message = str(info.value)
    assert named in message
    assert "grammar:" in message and "name[@batch=N]" in message


def test_json_plan_errors() -> None:
    with pytest.raises(FaultSpecError, match="not valid JSON"):
        FaultPlan.from_json("{")
    with pytest.raises(FaultSpecError, match="unknown key"):
        FaultPlan.from_json(json.dumps({"rules": [{"point": "a", "batches": 1}]}))
    with pytest.raises(FaultSpecError, match="missing 'point'"):
        FaultPlan.from_json(json.dumps({"rules": [{"action": "kill"}]}))
    with pytest.raises(FaultSpecError, match="times"):
        FaultPlan.from_json(json.dumps({"rules": [{"point": "a", "times": 0}]}))
    plan = FaultPlan.from_json(
        json.dumps({"rules": [{"point": "a", "batch": 2, "partition": None}], "state_dir": "/s"})
    )
    assert plan == FaultPlan((FaultRule("a", batch=2),), state_dir="/s")


def test_validate_and_registry() -> None:
    assert faultinject.declare("fi_test_point", "a test point") == "fi_test_point"
    faultinject.declare("fi_test_point", "a test point")  # idempotent
    with pytest.raises(ValueError, match="already declared"):
        faultinject.declare("fi_test_point", "something else")
    assert faultinject.declared_points()["fi_test_point"] == "a test point"
    FaultPlan.parse("fi_test_point:raise").validate()
    with pytest.raises(UnknownFaultPoint) as info:
        FaultPlan.parse("fi_test_point,nope@batch=1").validate({"fi_test_point": "x", "b": "y"})
    assert info.value.unknown == ["nope"]
    assert "nope" in str(info.value) and "b, fi_test_point" in str(info.value)


def test_env_of_plan(tmp_path: Path) -> None:
    plan = FaultPlan.parse("a:kill")
    assert plan.env(tmp_path) == {"TWOPC_FAULTS": "a:kill*1", "TWOPC_FAULT_STATE": str(tmp_path)}
    assert plan.env() == {"TWOPC_FAULTS": "a:kill*1"}  # no state given: each run counts in its own folder


# --- in-process arming ----------------------------------------------------------------


def test_unarmed_fault_point_is_noop() -> None:
    for batch in range(3):
        fault_point("after_decision", batch_id=batch, partition=0)  # returns, no raise


def test_raise_in_process_and_times() -> None:
    with armed("p:raise*2") as plan:
        assert plan.state_dir is not None and os.path.isdir(plan.state_dir)
        fault_point("other")  # different point: no-op
        for _ in range(2):
            with pytest.raises(InjectedFault) as info:
                fault_point("p", batch_id=7, partition=1)
            assert info.value.point == "p"
            assert info.value.context == {"batch_id": 7, "partition": 1}
        fault_point("p", batch_id=7)  # both slots used
        assert len(faultinject.read_firings(plan.state_dir)) == 2
    assert not os.path.exists(plan.state_dir)  # temporary state dir removed
    assert "TWOPC_FAULTS" not in os.environ
    fault_point("p")  # disarmed again


def test_batch_and_partition_filters() -> None:
    with armed("p@batch=2:raise, q@partition=1:raise"):
        fault_point("p", batch_id=0)
        fault_point("p", batch_id=1)
        fault_point("p")
        with pytest.raises(InjectedFault):
            fault_point("p", batch_id=2)
        fault_point("q", batch_id=2, partition=0)
        with pytest.raises(InjectedFault):
            fault_point("q", batch_id=2, partition=1)


def test_env_changes_are_seen(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fault_point("p")
    monkeypatch.setenv("TWOPC_FAULT_STATE", str(tmp_path))
    monkeypatch.setenv("TWOPC_FAULTS", "p:raise")
    with pytest.raises(InjectedFault):
        fault_point("p")
    monkeypatch.setenv("TWOPC_FAULTS", "bad:boom")
    with pytest.raises(FaultSpecError, match="boom"):
        fault_point("p")
    monkeypatch.delenv("TWOPC_FAULTS")
    fault_point("p")


def test_plan_file_arming(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    state = tmp_path / "state"
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(
        json.dumps({"rules": [{"point": "p", "batch": 1, "action": "raise", "times": 1}],
                    "state_dir": str(state)})
    )
    monkeypatch.setenv("TWOPC_FAULT_PLAN", str(plan_file))
    fault_point("p", batch_id=0)
    with pytest.raises(InjectedFault):
        fault_point("p", batch_id=1)
    fault_point("p", batch_id=1)
    assert len(faultinject.read_firings(state)) == 1


# --- actions in real processes ---------------------------------------------------------

_HIT = "from twopc import faultinject; faultinject.fault_point('p', batch_id=3); print('passed')"


def test_times_counted_across_processes(tmp_path: Path) -> None:
    env = _child_env(TWOPC_FAULTS="p:exit", TWOPC_FAULT_STATE=str(tmp_path))
    first = subprocess.run([sys.executable, "-c", _HIT], env=env, capture_output=True, text=True)
    assert first.returncode == 17
    assert "passed" not in first.stdout
    assert "faultinject: firing p (exit) batch=3 pid=" in first.stderr
    second = subprocess.run([sys.executable, "-c", _HIT], env=env, capture_output=True, text=True)
    assert second.returncode == 0 and "passed" in second.stdout


def test_kill_action_sigkills_the_process(tmp_path: Path) -> None:
    env = _child_env(TWOPC_FAULTS="p@batch=3:kill", TWOPC_FAULT_STATE=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", _HIT], env=env, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL
    assert "faultinject: firing p (kill) batch=3" in proc.stderr


_CRASH_OWN_GROUP = textwrap.dedent(
    """
    import subprocess, sys, faultinject
    child = subprocess.Popen(["sleep", "60"])
    print(child.pid, flush=True)
    faultinject.export_crash_group()
    faultinject.fault_point("p")
    print("survived", flush=True)
    """
)


def test_crash_kills_own_group_with_children(tmp_path: Path) -> None:
    env = _child_env(TWOPC_FAULTS="p:crash", TWOPC_FAULT_STATE=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", _CRASH_OWN_GROUP], env=env,
                          capture_output=True, text=True, start_new_session=True, timeout=30)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "survived" not in proc.stdout
    child_pid = int(proc.stdout.split()[0])
    assert _wait_dead(child_pid), "child in the crashed group is still alive"


def test_crash_kills_the_driver_group_from_another_group(tmp_path: Path) -> None:
    # "driver": a group of two sleeps; "worker": a python process in its own session.
    driver = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        assert driver.stdout is not None
        driver_child = int(driver.stdout.readline())
        env = _child_env(TWOPC_FAULTS="p:crash", TWOPC_FAULT_STATE=str(tmp_path),
                         TWOPC_CRASH_PGID=str(driver.pid))
        worker = subprocess.run([sys.executable, "-c", _HIT], env=env, capture_output=True,
                                text=True, start_new_session=True, timeout=30)
        assert worker.returncode == -signal.SIGKILL
        assert "faultinject: firing p (crash)" in worker.stderr
        assert driver.wait(timeout=5) == -signal.SIGKILL
        assert _wait_dead(driver_child)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()


def test_points_command() -> None:
    proc = subprocess.run([sys.executable, "-m", "twopc.faultinject", "points"], env=_child_env(),
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    bad = subprocess.run([sys.executable, "-m", "twopc.faultinject"], env=_child_env(),
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert bad.returncode == 2 and "usage" in bad.stderr


# --- ChaosRunner ------------------------------------------------------------------------

_JOB = textwrap.dedent(
    """
    import sys, faultinject
    faultinject.export_crash_group()
    with open(sys.argv[1], "a") as fh:
        fh.write("run\\n")
    print("progress: started", file=sys.stderr, flush=True)
    faultinject.fault_point("point", batch_id=0)
    print("progress: done", file=sys.stderr, flush=True)
    """
)


def test_chaos_runner_restarts_until_done(tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(_JOB)
    out = tmp_path / "runs.txt"
    progress: list[str] = []
    runner = ChaosRunner(env=_child_env(), cwd=tmp_path)
    report = runner.run_until_done([sys.executable, str(job), str(out)], "point:crash*2",
                                   max_restarts=5, timeout_s=60, on_progress=progress.append)
    assert report.completed, report.summary()
    assert report.crashes == 2 and len(report.runs) == 3
    assert [r.signal for r in report.runs] == [signal.SIGKILL, signal.SIGKILL, None]
    assert out.read_text().splitlines() == ["run"] * 3
    assert len(report.fired) == 2 and all("firing point (crash)" in f for f in report.fired)
    assert sum("firing point (crash)" in p for p in progress) == 2
    assert progress.count("progress: done") == 1
    assert "firing point" in report.runs[0].stderr_tail
    report.raise_for_status()


def test_chaos_runner_gives_up_and_times_out(tmp_path: Path) -> None:
    failing = ChaosRunner(env=_child_env()).run_until_done(
        [sys.executable, "-c", "raise SystemExit(3)"], "", max_restarts=2, timeout_s=60)
    assert not failing.completed and failing.crashes == 3
    assert failing.runs[0].returncode == 3 and failing.runs[0].signal is None
    with pytest.raises(faultinject.ChaosJobFailed, match="exit 3"):
        failing.raise_for_status()

    pid_file = tmp_path / "pid"
    hang = f"sleep 60 & echo $! > {pid_file}; wait"
    start = time.monotonic()
    report = ChaosRunner(env=_child_env()).run_until_done(["sh", "-c", hang], "", timeout_s=1.5)
    assert time.monotonic() - start < 15
    assert report.timed_out and not report.completed and report.crashes == 0
    assert _wait_dead(int(pid_file.read_text()))


def test_armed_reaches_spark_python_workers(spark: object) -> None:
    sc = spark.sparkContext  # type: ignore[attr-defined]  # the session fixture, typed object here

    def hit(index: int, rows: object) -> object:
        fault_point("p", batch_id=0, partition=index)
        yield index

    with armed("p@partition=1:raise", spark_context=sc) as plan:
        # The first attempt of partition 1 fails in the worker; Spark's retry passes.
        assert sorted(sc.parallelize(range(4), 2).mapPartitionsWithIndex(hit).collect()) == [0, 1]
        assert plan.state_dir is not None
        firings = faultinject.read_firings(plan.state_dir)
    assert len(firings) == 1 and "firing p (raise) batch=0" in firings[0]
    assert "TWOPC_FAULTS" not in sc.environment
