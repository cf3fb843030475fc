"""Every throwaway server dies with the process that started it, however that process ends.

A child process starts servers the way the test fixtures and ``make demo`` do (``LocalPostgres``,
``LocalMariaDB``, ``LocalRedis``, a crash drill's job under ``ChaosRunner``; the Spark standalone
daemons and a Spark Connect server), prints their pids and waits. The test SIGKILLs the child,
as a killed ``make test`` or an out-of-memory kill would: no ``atexit`` hook, no ``finally``
runs. Then every process that belonged to a server (the server, what descends from it and
the members of its process group and session, as seen just before the kill) must be gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from twopc.faultinject._proctree import descendants, kill_job, start_time

from tests._fault_helpers import child_env

_GONE_WITHIN_S = 60.0  # generous: SIGKILL is asynchronous and the machine may be loaded

_SERVERS = textwrap.dedent(
    """
    import json, os, sys, threading, time
    from twopc.faultinject import ChaosRunner, LocalMariaDB, LocalPostgres, LocalRedis

    pg = LocalPostgres(max_prepared_transactions=64).start()            # as tests/fix_postgres.py
    maria = LocalMariaDB(base_dir=sys.argv[1]).start()                   # as tests/fix_mariadb.py
    redis = LocalRedis(appendfsync="always", base_dir=sys.argv[1]).start()  # as tests/fix_redis.py
    job_pid = os.path.join(sys.argv[1], "job.pid")                       # a crash drill's job
    job = [sys.executable, "-c", "import os, sys, time; "
           "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)", job_pid]
    threading.Thread(target=ChaosRunner(cwd=sys.argv[1]).run_until_done, args=(job, ""), daemon=True).start()
    while not os.path.exists(job_pid) or not open(job_pid).read():
        time.sleep(0.05)
    print(json.dumps({"servers": {"postgres": pg.pid, "mariadb": maria.pid, "redis": redis.pid,
                                  "crash drill job": int(open(job_pid).read())},
                      "folders": [os.path.dirname(pg.data_dir)]}), flush=True)
    time.sleep(600)
    """
)

# Spark's daemons: one script per kind, each started with base_dir = the test's folder.
_SPARK = textwrap.dedent(
    """
    import json, sys, time
    from twopc.faultinject import LocalSparkCluster, LocalSparkConnect

    server = {"connect": LocalSparkConnect, "cluster": LocalSparkCluster}[sys.argv[2]]
    server(base_dir=sys.argv[1], **json.loads(sys.argv[3])).start()
    print(json.dumps({"servers": {}, "folders": []}), flush=True)
    time.sleep(600)
    """
)

def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"

def _started_by(runner: int) -> dict[int, int]:
    """What *runner* started: its descendants and the members of the process groups and
    sessions they lead, pid -> start time (the runner itself left out)."""
    procs, table = descendants([runner])
    procs |= {pid for pid, found in table.items() if {found.pgrp, found.session} & procs}
    procs.discard(runner)
    return {pid: start for pid in procs if (start := start_time(pid)) is not None}

def _still_running(procs: dict[int, int]) -> dict[int, int]:
    return {pid: start for pid, start in procs.items() if start_time(pid) == start}

def _kill_runner_and_watch(script: str, *args: str) -> str:
    """Run *script*, SIGKILL it once its servers are up, assert that everything it started is
    gone soon after; what it started, one command a line. The servers' folder is a short one
    under the temporary directory (MariaDB's socket path must fit a unix socket's 108 bytes;
    a pytest-xdist worker's ``tmp_path`` may not)."""
    base = tempfile.mkdtemp(prefix="twopc-die-")
    runner = subprocess.Popen([sys.executable, "-c", script, base, *args], env=child_env(),
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    procs: dict[int, int] = {}
    folders: list[str] = [base]
    try:
        assert runner.stdout is not None
        line = runner.stdout.readline()
        assert line, f"the runner exited {runner.wait()} before its servers were up"
        started = json.loads(line)
        folders += started["folders"]
        procs = _started_by(runner.pid)
        commands = {pid: _command(pid) for pid in procs}
        for name, pid in started["servers"].items():
            assert pid in procs, f"{name} (pid {pid}) is not running"

        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        deadline = time.monotonic() + _GONE_WITHIN_S
        while (left := _still_running(procs)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, (f"{len(left)} of the {len(procs)} processes the SIGKILLed runner started outlived it:\n"
                          + "\n".join(f"  {pid} {commands[pid][:150]}" for pid in sorted(left)))
        return "\n".join(commands.values())
    finally:
        with contextlib.suppress(OSError):
            os.killpg(runner.pid, signal.SIGKILL)
        runner.wait()
        if left := _still_running(procs):  # what the assertion above reported: not left behind
            kill_job(left)
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)

def test_sql_and_redis_servers_and_a_crash_drill_die_with_their_killed_runner() -> None:
    _kill_runner_and_watch(_SERVERS)

def test_a_spark_connect_server_dies_with_its_killed_runner() -> None:
    started = _kill_runner_and_watch(_SPARK, "connect", '{"cores": 1}')
    assert "org.apache.spark.sql.connect.service.SparkConnectServer" in started, started

@pytest.mark.nightly  # three JVMs; the cluster serves only the nightly crash matrix (test_spark_cluster.py)
def test_a_spark_standalone_cluster_dies_with_its_killed_runner() -> None:
    started = _kill_runner_and_watch(_SPARK, "cluster", '{"workers": 1}')
    for cls in ("org.apache.spark.deploy.master.Master", "org.apache.spark.deploy.worker.Worker"):
        assert cls in started, f"no {cls} among what the runner started:\n{started}"
