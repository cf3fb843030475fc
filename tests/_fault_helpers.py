"""Helpers for the tests that run fault plans in processes of their own."""

from __future__ import annotations

import os
import time
from pathlib import Path

FAULT_ENV = ("TWOPC_FAULTS", "TWOPC_FAULT_PLAN", "TWOPC_FAULT_STATE", "TWOPC_FAULT_RUN", "TWOPC_CRASH_PGID")
REPO = Path(__file__).resolve().parents[1]


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment without any fault variable, the repository first on the path."""
    env = {k: v for k, v in os.environ.items() if k not in FAULT_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def wait_dead(pid: int, timeout_s: float = 5.0) -> bool:
    """Wait until ``pid`` is gone; False if it still runs after *timeout_s*."""
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
