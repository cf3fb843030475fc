"""Starting the driver agent: a plan starts it early (while it validates the target) and the
lease request that follows in the same process waits for that agent instead of starting a
second one, which would only find the first and exit (a wasted interpreter start on the
driver's first write)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from twopc._driver_identity import identity_of
from twopc.spi import DriverAgent


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
        assert len(_agents_of(first.key)) == 1
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
