"""What both crash matrices share: running a job module under a fault plan until it
completes, and asking which faults fired."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import faultinject

REPO = Path(__file__).resolve().parent.parent


def run_job_until_done(module_args: Sequence[str], env: dict[str, str], state_dir: Path, plan: str, *,
                       max_restarts: int, timeout_s: float) -> faultinject.ChaosReport:
    """``python -m <module_args>`` restarted after every crash until it exits 0 (asserted)."""
    runner = faultinject.ChaosRunner(
        env={**os.environ, **env, "PYSPARK_PYTHON": sys.executable},
        cwd=REPO, state_dir=state_dir, stdout=subprocess.DEVNULL,
    )
    report = runner.run_until_done([sys.executable, "-m", *module_args], plan,
                                   max_restarts=max_restarts, timeout_s=timeout_s)
    assert report.completed, report.summary() + "\n" + (report.runs[-1].stderr_tail if report.runs else "")
    return report


def fired(report: faultinject.ChaosReport, point: str) -> bool:
    """Whether fault *point* fired during the runs of *report*."""
    return any(f" {point} " in line for line in report.fired)
