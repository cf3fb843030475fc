"""twopc's packages live under ``twopc`` (``twopc.sinks``, ``twopc.recovery``,
``twopc.faultinject``): a class path an older checkpoint recorded under the old top-level names
still loads, and a job's own module of the same name never stands in for twopc's."""

import subprocess
import sys
from pathlib import Path

from twopc.sinks.postgres import PostgresSink
from twopc.spi.operations import load_object


def test_a_class_path_recorded_under_the_old_top_level_name_loads_from_twopc() -> None:
    assert load_object("sinks.postgres._sink:PostgresSink") is PostgresSink
    assert load_object("twopc.sinks.postgres._sink:PostgresSink") is PostgresSink


def test_a_jobs_own_sinks_module_does_not_capture_twopcs_paths(tmp_path: Path) -> None:
    (tmp_path / "sinks.py").write_text("OWN = True\n")
    code = ("import sinks\n"
            "from twopc.spi.operations import load_object\n"
            "cls = load_object('sinks.postgres._sink:PostgresSink')\n"
            "assert sinks.OWN and cls.__module__ == 'twopc.sinks.postgres._sink', cls\n"
            "assert load_object('sinks:OWN') is True  # the job's own module, which twopc never had\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
