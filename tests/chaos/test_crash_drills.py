"""Crash drills as the README teaches them: ``TWOPC_FAULTS`` in the environment of a plain job
(no call to ``export_crash_group``), the job started the way ``make`` or a shell script starts
it (not leading a process group of its own). A ``crash`` kills the whole job, driver, Spark's JVM
and its Python workers, whichever of them the point fires in, and nothing else; each run of the
same spec fires anew; the folder a run counts ``times`` in is gone when the run ends."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests._fault_helpers import FAULT_ENV, REPO, alive, child_env, wait_dead
from tests._filesink_helpers import committed_ids

# A make-like shell: it leads its own group, a sentinel runs in that group, and the job runs in it
# too (not as a group leader). It prints the job's exit status once the job ends.
_MAKE = 'sleep 600 >/dev/null 2>&1 & echo "sentinel $!"; "$@"; echo "rc $?"'


@pytest.fixture(autouse=True)
def _unarmed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in FAULT_ENV:
        monkeypatch.delenv(name, raising=False)


def _marked(mark: str) -> list[int]:
    """Live processes whose environment holds ``TWOPC_DRILL_MARK=<mark>`` (the job's, inherited by
    everything it starts: the JVM, the Python worker daemons and their workers)."""
    needle = f"TWOPC_DRILL_MARK={mark}".encode()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                environ = Path(f"/proc/{name}/environ").read_bytes()
            except OSError:
                continue
            if needle in environ.split(b"\0") and alive(int(name)):
                found.append(int(name))
    return found


class _Make:
    """Run a job command inside a make-like process group (see :data:`_MAKE`)."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path, timeout: float = 600) -> None:
        self.mark = uuid.uuid4().hex
        proc = subprocess.Popen(["sh", "-c", _MAKE, "make", "env", f"TWOPC_DRILL_MARK={self.mark}", *cmd],
                                env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            self.out, self.err = proc.communicate(timeout=timeout)
            self.shell_rc = proc.returncode
            self.sentinel = int(self.out.split("sentinel ", 1)[1].split()[0])
            self.sentinel_survived = alive(self.sentinel)
        finally:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)  # the sentinel (the whole group is this test's)
            proc.wait()
        rc = [line.split()[1] for line in self.out.splitlines() if line.startswith("rc ")]
        self.job_rc = int(rc[0]) if rc else None  # None: the shell did not live to say it

    def assert_crashed(self, line: str) -> None:
        """The job died by SIGKILL after *line*; the shell and the sentinel of its group did not."""
        tail = self.err[-3000:]
        assert line in self.err, f"the fault did not fire:\n{tail}"
        assert self.shell_rc == 0 and self.sentinel_survived, f"the crash killed the job's group:\n{tail}"
        assert self.job_rc == 128 + signal.SIGKILL, f"job exit {self.job_rc}, not SIGKILL:\n{tail}"
        deadline = time.monotonic() + 30  # SIGKILL is asynchronous
        while _marked(self.mark) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _marked(self.mark)
        assert not left, f"processes of the crashed job still run: {left}"


def _run_folders(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("twopc-faults"))


# --- without Spark: the process the point fires in is the driver ---------------------------------

_DRIVER = textwrap.dedent(
    """
    import subprocess
    from twopc import faultinject
    child = subprocess.Popen(["sleep", "600"])
    print("child", child.pid, flush=True)
    faultinject.fault_point("p", batch_id=3)
    print("survived", flush=True)
    """
)


def _crashed(tmp_path: Path, code: str) -> _Make:
    """Run *code* (which reaches point ``p`` of batch 3) with ``p:crash`` armed; it died there."""
    (tmp_path / "tmp").mkdir()
    env = child_env(TWOPC_FAULTS="p:crash", TMPDIR=str(tmp_path / "tmp"))
    run = _Make([sys.executable, "-c", code], env, tmp_path, timeout=60)
    run.assert_crashed("faultinject: firing p (crash) batch=3")
    return run


def test_a_crash_in_the_driver_kills_it_and_its_children_not_the_group_it_runs_in(tmp_path: Path) -> None:
    run = _crashed(tmp_path, _DRIVER)
    assert "survived" not in run.out
    assert wait_dead(int(run.out.split("child ", 1)[1].split()[0]))
    assert _run_folders(tmp_path / "tmp") == []  # the crash ended the run: its folder is gone


# A driver, a forwarder that pipes its worker's stderr to itself (as Spark's JVM does) and has not
# copied anything yet when the worker's crash kills it, and the worker the point fires in.
_FORWARDED = textwrap.dedent(
    """
    import subprocess, sys
    from twopc import faultinject
    faultinject.export_run()
    worker = "from twopc import faultinject; faultinject.fault_point('p', batch_id=3)"
    forwarder = ("import subprocess, sys, time; "
                 f"subprocess.Popen([sys.executable, '-c', {worker!r}], stderr=subprocess.PIPE); "
                 "time.sleep(600)")
    subprocess.run([sys.executable, "-c", forwarder])
    print("survived", flush=True)
    """
)


def test_a_crash_in_a_worker_whose_stderr_is_piped_tells_the_driver_s_stderr(tmp_path: Path) -> None:
    run = _crashed(tmp_path, _FORWARDED)
    assert run.err.count("faultinject: firing p (crash)") == 1  # the forwarder copied nothing
    assert "survived" not in run.out


# --- times: per run of an inline spec ----------------------------------------------------------

_TWICE = textwrap.dedent(
    """
    from twopc import faultinject
    for hit in range(2):
        try:
            faultinject.fault_point("p", batch_id=3)
            print("passed", flush=True)
        except faultinject.InjectedFault:
            print("raised", flush=True)
    """
)


def test_each_run_of_an_inline_spec_fires_again_and_leaves_no_folder(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = child_env(TWOPC_FAULTS="p:raise", TMPDIR=str(tmp))
    runs = [subprocess.run([sys.executable, "-c", _TWICE], env=env, capture_output=True, text=True, timeout=60)
            for _ in range(2)]
    assert [run.stdout.split() for run in runs] == [["raised", "passed"]] * 2  # once in each run of the spec
    assert _run_folders(tmp) == []  # each run ended: its folder went with it
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", "from twopc import faultinject; faultinject.fault_point('p')"],
                              env=child_env(TWOPC_FAULTS="p:exit", TMPDIR=str(tmp)), capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 17
        assert _run_folders(tmp) == []


_PARENT = textwrap.dedent(
    """
    import subprocess, sys
    from twopc import faultinject
    faultinject.export_run()
    print("state", faultinject.current_state_dir(), flush=True)
    hit = "from twopc import faultinject; faultinject.fault_point('p'); print('passed')"
    for _ in range(2):
        print("child", subprocess.run([sys.executable, "-c", hit]).returncode, flush=True)
    faultinject.fault_point("p")
    print("parent passed", flush=True)
    """
)


def test_times_count_across_the_processes_of_one_run(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.run([sys.executable, "-c", _PARENT], env=child_env(TWOPC_FAULTS="p:exit", TMPDIR=str(tmp)),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line for line in lines if line.startswith("child")] == ["child 17", "child 0"]
    assert "parent passed" in lines
    state = Path(lines[0].split(" ", 1)[1])
    assert state.parent == tmp and state.name.startswith("twopc-faults-run-")
    assert not state.exists()  # the run's root exited: the run is over


_KILLED = textwrap.dedent(
    """
    import os, signal
    from twopc import faultinject
    print(faultinject.current_state_dir(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_the_folder_of_a_run_killed_from_outside_goes_with_the_next_run(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = child_env(TWOPC_FAULTS="p:raise", TMPDIR=str(tmp))
    killed = subprocess.run([sys.executable, "-c", _KILLED], env=env, capture_output=True, text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL
    left = Path(killed.stdout.strip())
    assert left.is_dir()  # nothing of the run could delete it
    unknown = tmp / "twopc-faults-run-notarun"
    unknown.mkdir()  # no run record: not faultinject's to delete
    proc = subprocess.run([sys.executable, "-c", _TWICE], env=env, capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["raised", "passed"], proc.stderr
    assert _run_folders(tmp) == [unknown.name]


# --- a Spark job: the point fires in a Spark Python worker ---------------------------------------

_DRILL = textwrap.dedent(
    """
    import sys

    from pyspark.sql import SparkSession

    from twopc import sinks

    work = sys.argv[1]
    spark = (SparkSession.builder.master("local[2]").appName("drill").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    sinks.register_all(spark)
    query = (spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).parquet(f"{work}/input")
             .writeStream.format("twopc-file").option("path", f"{work}/out")
             .option("checkpointLocation", f"{work}/ck").trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()
    """
)


@pytest.mark.chaos
def test_a_readme_crash_drill_kills_the_whole_spark_job_on_every_run(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    job = tmp_path / "job.py"
    job.write_text(_DRILL)
    for name in ("a", "b"):
        for batch in range(3):
            (tmp_path / name / "input").mkdir(parents=True, exist_ok=True)
            ids = pa.array(range(10 * batch, 10 * batch + 10), pa.int64())
            pq.write_table(pa.table({"id": ids}), tmp_path / name / "input" / f"part-{batch}.parquet")
    env = child_env(TMPDIR=str(tmp_path / "tmp"), PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    drill = {**env, "TWOPC_FAULTS": "after_decision@batch=1:crash"}

    for name in ("a", "b"):  # the same spec twice (a new query each time): both runs die there
        run = _Make([sys.executable, str(job), str(tmp_path / name)], drill, REPO)
        run.assert_crashed("faultinject: firing after_decision (crash) batch=1")
        # batch 0 (one input file; files of the same age come in any order) committed, batch 1 decided only
        first = committed_ids(tmp_path / name / "out")
        assert first[:1] in ([0], [10], [20]) and first == list(range(first[0], first[0] + 10))
    assert _run_folders(tmp_path / "tmp") == []

    restart = _Make([sys.executable, str(job), str(tmp_path / "a")], env, REPO)  # without the spec
    assert restart.job_rc == 0, restart.err[-3000:]
    assert committed_ids(tmp_path / "a" / "out") == list(range(30))  # batch 1 finished once, nothing twice
