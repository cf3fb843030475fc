"""twopc as a user gets it: the sdist and the wheel built from it, installed into a fresh
virtualenv, run the README's batch quickstart from a job folder that holds its own
``sinks.py`` and ``recovery.py``.

The same job also runs from the checkout (its root on ``PYTHONPATH``, nothing installed) and
from the editable install the suite runs in: all three import one package, ``twopc``, so the
job's own modules never stand in for twopc's, in the driver or in Spark's Python workers.

The fresh virtualenv gets the wheel alone (``--no-deps``); its third-party dependencies
(pyspark, psycopg, ...) come from the suite's environment through a path file, which adds
that folder to ``sys.path`` without running its own path files, so the suite's editable
twopc is not importable there. A module or data file missing from the wheel fails here.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests._doc_blocks import block_under, substitutions
from tests._paths import REPO_ROOT

# A data team's job folder: modules named like twopc's packages, as pipelines often have.
_OWN_SINKS = '"""Where this team\'s pipeline writes: its own module, not twopc\'s."""\nTABLE = "daily_totals"\n'
_OWN_RECOVERY = '"""This team\'s own retry settings."""\nRETRIES = 3\n'
_JOB = '''
import json, sys
import recovery, sinks                      # the job's own modules
assert sinks.TABLE == "daily_totals" and recovery.RETRIES == 3
{quickstart}
import twopc, twopc.sinks
print("RESULT " + json.dumps({{"twopc": twopc.__file__, "sinks": twopc.sinks.__file__,
                               "own": sinks.__file__}}))
'''


def _run(cmd: list[str], cwd: Path | None = None,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, (f"{cmd[:4]} exited {done.returncode}\n"
                                  f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-5000:]}")
    return done


def _source_copy(dest: Path) -> Path:
    """The checkout's files (tracked and new, not ignored; symlinks kept) in *dest*: the build
    writes its metadata next to the sources, and the checkout stays untouched."""
    listed = _run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO_ROOT).stdout.split("\0")
    for name in filter(None, listed):
        src = REPO_ROOT / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, target)
    return dest


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist, and the wheel built from the unpacked sdist (so a file the sdist misses fails too)."""
    work = tmp_path_factory.mktemp("build")
    source = _source_copy(work / "source")
    out = work / "dist"
    out.mkdir()
    hook = "import setuptools.build_meta as b, sys; print(b.{}(sys.argv[1]))"
    sdist = out / _run([sys.executable, "-c", hook.format("build_sdist"), str(out)], cwd=source).stdout.split()[-1]
    with tarfile.open(sdist) as tar:
        tar.extractall(work / "unpacked", filter="data")
    (unpacked,) = (work / "unpacked").iterdir()
    wheel = out / _run([sys.executable, "-c", hook.format("build_wheel"), str(out)], cwd=unpacked).stdout.split()[-1]
    return {"sdist": sdist, "wheel": wheel}


def test_the_distribution_is_pyspark_twopc_with_one_import_package(dists: dict[str, Path]) -> None:
    assert dists["wheel"].name.startswith("pyspark_twopc-") and dists["sdist"].name.startswith("pyspark_twopc-")
    names = zipfile.ZipFile(dists["wheel"]).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"twopc"}, tops
    for needed in ("twopc/py.typed", "twopc/sinks/__init__.py", "twopc/sinks/redis/_lua.py",
                   "twopc/recovery/_cli.py", "twopc/faultinject/__init__.py", "twopc/testing/job.py"):
        assert needed in names, needed


def _fresh_venv(where: Path) -> Path:
    """A new virtualenv whose third-party packages are the suite's (see the module docstring)."""
    _run([sys.executable, "-m", "venv", str(where)])
    python = where / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (site / "suite_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


@pytest.mark.parametrize("install", ["wheel", "checkout", "editable"])
def test_the_readme_batch_quickstart_runs_beside_a_jobs_own_sinks_and_recovery(
        install: str, dists: dict[str, Path], postgres_url: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    if install == "editable":
        python = Path(sys.executable)
    else:
        python = _fresh_venv(tmp_path / "venv")
        if install == "wheel":
            _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(dists["wheel"])])
        else:
            env["PYTHONPATH"] = str(REPO_ROOT)
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = str(python)
    job = tmp_path / "job"
    job.mkdir()
    (job / "sinks.py").write_text(_OWN_SINKS)
    (job / "recovery.py").write_text(_OWN_RECOVERY)
    quickstart = block_under(REPO_ROOT / "README.md", "## Quickstart: a batch job, all or nothing, once per run").code
    for placeholder, real in substitutions(postgres_url, "redis://unused:6379/0", tmp_path):
        quickstart = quickstart.replace(placeholder, real)
    quickstart = quickstart.replace("daily_totals", f"daily_totals_{install}")
    (job / "job.py").write_text(_JOB.format(quickstart=quickstart))
    done = _run([str(python), "job.py"], cwd=job, env=env)
    assert "(1,)" in done.stdout.splitlines(), done.stdout  # the quickstart's rerun wrote nothing
    where = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert where["own"] == str(job / "sinks.py")
    if install == "wheel":
        assert where["twopc"].startswith(str(tmp_path / "venv")), where
        assert where["sinks"].startswith(str(tmp_path / "venv")), where
    else:
        assert Path(where["twopc"]).resolve().is_relative_to(REPO_ROOT), where
