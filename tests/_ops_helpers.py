"""Helpers of the operations tests: a real streaming query SIGKILLed once at a fault point
(the conformance kit's job, run by :class:`twopc.faultinject.ChaosRunner` without a restart), and
the ``twopc`` console script run as an operator runs it, secrets from the environment."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import from_arrow_schema

from twopc import faultinject
from twopc.testing import DEFAULT_SPARK_CONF, SinkHarness

__all__ = ["REPO", "cli_env", "crash_query_once", "twopc_cli"]

REPO = Path(__file__).resolve().parent.parent


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    old = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join([str(REPO), *([old] if old else [])]), **(extra or {})}


def crash_query_once(harness: SinkHarness, work: Path, fault: str, *, ids: Sequence[int],
                     partitions: int = 2) -> Path:
    """Stream *ids* (one micro-batch) into *harness*'s sink from a query in a subprocess that
    the fault spec *fault* SIGKILLs (driver, JVM and Python workers); return its checkpoint.

    Raises:
        AssertionError: the fault did not fire, or the job was not killed by it.
    """
    (work / "in").mkdir(parents=True)
    pq.write_table(pa.Table.from_batches([harness.rows(list(ids))]), work / "in" / "part-00000.parquet")
    ck = work / "ck"
    spec = {"sink": harness.sink_path(), "format": harness.format_name, "options": harness.sink_options(),
            "schema": from_arrow_schema(harness.schema).jsonValue(), "input": str(work / "in"),
            "checkpoint": str(ck), "partitions": [partitions], "runs_file": str(work / "runs.txt"),
            "spark_conf": dict(DEFAULT_SPARK_CONF)}
    spec_path = work / "job.json"
    fd = os.open(spec_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(spec, f)
    try:
        runner = faultinject.ChaosRunner(env=cli_env(), cwd=work, state_dir=work / "faults", stdout=subprocess.DEVNULL,
                                         tail_lines=80)
        report = runner.run_until_done([sys.executable, "-m", "twopc.testing.job", str(spec_path)], fault,
                                       max_restarts=0, timeout_s=300)
    finally:
        spec_path.unlink()
    run = report.runs[-1]
    assert report.fired and not run.ok and not run.timed_out, (report.summary(), run.stderr_tail)
    return ck


def twopc_cli(*args: str, options: Mapping[str, str] | None = None, timeout: float = 120,
              env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed ``twopc`` console script with *args*; each of *options* reaches it
    through ``--option-env`` (an environment variable), never on the command line."""
    script = shutil.which("twopc", path=os.path.dirname(sys.executable))
    assert script is not None, "the twopc console script is not installed: run make venv"
    options = options or {}
    extra = {f"TWOPC_TEST_OPT_{i}": v for i, v in enumerate(options.values())}
    pairs = [a for i, k in enumerate(options) for a in ("--option-env", f"{k}=TWOPC_TEST_OPT_{i}")]
    return subprocess.run([script, *args, *pairs], capture_output=True, text=True, timeout=timeout,
                          env=cli_env({**extra, **(env or {})}), cwd=REPO)

