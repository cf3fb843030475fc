"""The protocol's fault points are known to a process that has loaded none of the protocol: the
documented ``python -m twopc.faultinject points`` lists them, and a plan naming one validates
(the points are declared as data, through the ``twopc.fault_points`` entry point)."""

from __future__ import annotations

import subprocess
import sys

from twopc._faults import POINTS

_FRESH_VALIDATE = """
import sys
from twopc.faultinject import FaultPlan
FaultPlan.parse("after_decision:crash,between_commits:raise").validate()
assert "twopc._coordinator" not in sys.modules
"""


def test_the_points_command_lists_every_protocol_point() -> None:
    out = subprocess.run([sys.executable, "-m", "twopc.faultinject", "points"], capture_output=True, text=True,
                         check=True).stdout
    listed = dict(line.split("\t", 1) for line in out.splitlines())
    assert listed.keys() >= POINTS.keys(), out
    assert all(listed[name] == description for name, description in POINTS.items())


def test_a_plan_naming_a_protocol_point_validates_in_a_fresh_process() -> None:
    run = subprocess.run([sys.executable, "-c", _FRESH_VALIDATE], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
