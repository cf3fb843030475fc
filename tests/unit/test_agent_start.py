"""Starting the driver agent: a plan starts it early (while the sink loads its database code
and validates the target) and the lease request that follows in the same process waits for
that agent instead of starting a second one, which would only find the first and exit (a
wasted interpreter start on the driver's first write)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from twopc._driver_identity import identity_of
from twopc.spi.lease import DriverAgent


def _agents_of(key: str) -> list[int]:
    """Process ids of the live (not zombie) agent processes of driver *key*."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if key.encode() in argv and state != "Z":
            out.append(int(entry.name))
    return out


def test_a_second_request_of_the_driver_waits_for_the_agent_this_process_started() -> None:
    driver = subprocess.Popen(["sleep", "600"])  # stands for the driver's JVM
    first, second = DriverAgent(identity_of(driver.pid)), DriverAgent(identity_of(driver.pid))
    try:
        first.start()  # the plan's early start, not waited for
        second.start()  # the lease's request, before the first agent listens
        # the second request started no process of its own: it waits for the first one (a
        # count of processes here would race the kernel, which shows a starting process's
        # command line only once its exec has set it up)
        assert second._proc is first._proc is not None
        deadline = time.monotonic() + 60
        while (pid := second.running()) is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert _agents_of(first.key) == [pid]
    finally:
        driver.kill()
        driver.wait()
    deadline = time.monotonic() + 60
    while _agents_of(first.key):  # the agent ends with its driver
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_an_agent_starting_while_another_agents_sweep_holds_its_lock_still_starts() -> None:
    """A sweep locks a lock file for a moment (to learn whether its agent is gone) and then
    removes it; an agent starting in that moment waits for the lock and takes the new file."""
    import fcntl
    import os

    driver = subprocess.Popen(["sleep", "600"])  # stands for the driver's JVM
    agent = DriverAgent(identity_of(driver.pid))
    lock_path = agent.folder / f"{agent.key}.lock"
    sweep = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(sweep, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the sweep's moment
    try:
        agent.start()
        time.sleep(0.2)  # the agent is refused the lock meanwhile
        os.unlink(lock_path)  # the sweep found no agent and removes the driver's files
        os.close(sweep)
        deadline = time.monotonic() + 60
        while (pid := agent.running()) is None:
            assert agent._proc is not None and agent._proc.poll() is None, "the agent gave up to a sweep"
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert _agents_of(agent.key) == [pid]
        probe = os.open(lock_path, os.O_RDWR)
        try:  # the agent holds the file now at the lock's path, not the removed one
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                pass
            else:
                raise AssertionError("nobody holds the driver's lock file")
        finally:
            os.close(probe)
    finally:
        driver.kill()
        driver.wait()


#: An agent that takes one request and closes the connection without a word (having read the
#: request, or not: the client then sees the connection reset), then still runs a moment before
#: it exits: what a killed agent looks like to a client between its connections closing and its
#: process ending.
_DYING_AGENT = """
import os, socket, sys, time
folder, key, read = sys.argv[1], sys.argv[2], sys.argv[3] == "read"
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(f"{folder}/{os.getpid()}.sock")
server.listen()
ticks = open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]
with open(f"{folder}/{key}.pid.tmp", "w") as f:
    f.write(f"{os.getpid()} {ticks}")
os.replace(f"{folder}/{key}.pid.tmp", f"{folder}/{key}.pid")
print("listening", flush=True)
conn, _ = server.accept()
if read:
    conn.makefile().readline()
else:
    time.sleep(0.3)  # the request arrives and stays unread: closing resets the connection
conn.close()
time.sleep(1.0)
"""


@pytest.mark.parametrize("request_read", ["read", "unread"])
def test_a_request_to_an_agent_that_ends_without_answering_is_asked_of_a_new_agent(request_read: str) -> None:
    driver = subprocess.Popen(["sleep", "600"])  # stands for the driver's JVM
    agent = DriverAgent(identity_of(driver.pid))
    dying = subprocess.Popen([sys.executable, "-c", _DYING_AGENT, str(agent.folder), agent.key, request_read],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert dying.stdout is not None and dying.stdout.readline().strip() == "listening"
        assert agent.running() == dying.pid
        pid, words = agent.request({"op": "no such request"}, 30.0)
        assert words == ["error", "UnknownRequest"]  # a real agent's answer, once the dying one was gone
        assert pid not in (0, dying.pid)
        assert dying.wait(timeout=60) == 0
    finally:
        dying.kill()
        dying.wait()
        driver.kill()
        driver.wait()
