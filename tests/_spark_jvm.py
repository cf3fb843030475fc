"""Faster starts for the Spark applications the tests start.

Most of the suite's time goes to starting Spark: every crash of a crash matrix kills a driver
JVM and its Python workers, and the restart starts them again. Three things make a start
cheaper; :func:`use_fast_starts` gives them to every Spark application the test session
starts from then on (the ``spark`` fixture's, a crash matrix's jobs, a Connect server, a
script run as ``python script.py``), through the environment those inherit:

- ``SPARK_HOME``: the installed pyspark as it is, but without ``python/lib`` (Spark's
  ``pyspark.zip`` and py4j's zip). Spark puts those zips first on its Python workers'
  path, and Python compiles every module it imports from a zip afresh, in every worker
  process (about 0.5 s of CPU each, a dozen of them per application): without them the
  workers import the installed pyspark and py4j (the same files) from their bytecode
  caches. The home lives in the user's cache folder (``$XDG_CACHE_HOME/twopc-tests``),
  its entries links to the installed ones.
- ``SPARK_SUBMIT_OPTS`` (which Spark's launcher puts on the driver JVM's command line):
  :data:`JVM_OPTIONS`, the C1 compiler only, in one thread, and the serial GC (a driver of a
  few micro-batches never reaches the code C2 would pay back); the shared ``spark``
  fixture's JVM, which lives as long as the session, keeps the default JIT and GC
  (:func:`long_lived_driver`);
- and a dynamic class-data-sharing archive of the classes a Spark driver loads
  (``-XX:SharedArchiveFile``): the JVM maps them, parsed and verified, instead of reading
  and verifying them from the jars. It is made once per Spark installation and Java, by a
  small Spark job run with ``-XX:ArchiveClassesAtExit``, and kept in the cache folder too.
  A JVM whose class path or Java differs from the archive's ignores it, silently
  (``-Xlog:cds=off``).

Measured on a job like the crash matrix's (a streaming query of three one-file micro-batches
into ``twopc-file``; CPU time of every process of the job, in a cgroup of its own, on two
loaded cores): 34-36 s by default, 21-26 s with C1 and the serial GC, 18-20 s with those and
the home without zips, 15-16 s with those and the archive, 11-13 s with all three. Making
the archive costs one such job, about 55 s, once per Spark installation. A test session
that starts no Spark (``make test-fast``) does none of this.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["JVM_OPTIONS", "class_archive", "java_options", "long_lived_driver", "spark_home_without_zips",
           "use_fast_starts"]

#: A short-lived driver's JIT (C1 only, one compiler thread) and GC (serial), and no
#: performance-counter file (nothing here reads one): the first two are what the crash
#: matrix's jobs always used.
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:CICompilerCount=1", "-XX:-UsePerfData")
#: A JVM that cannot use the archive says nothing about it.
_QUIET = "-Xlog:cds=off,cds+dynamic=off"
#: How long making the archive may take (a Spark job on a loaded machine).
_BUILD_TIMEOUT_S = 900.0

# The job the archive is made from: what the suite's Spark jobs do, so that their classes are in it
# (a session with every twopc format, a streaming query from Parquet through a repartition into a
# Python data source, a batch write, a read back).
_JOB = """
import sys
import pyarrow as pa, pyarrow.parquet as pq
from pyspark.sql import SparkSession
from twopc import sinks
work = sys.argv[1]
for i in range(2):
    pq.write_table(pa.table({"id": pa.array([i], pa.int64()), "payload": ["p"], "amount": [0.5]}),
                   f"{work}/in/part-{i}.parquet")
spark = (SparkSession.builder.master("local[2,3]").appName("twopc-tests-class-archive")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC").config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
sinks.register_all(spark)
stream = spark.readStream.schema("id long, payload string, amount double").option("maxFilesPerTrigger", 1)
query = (stream.parquet(f"{work}/in").repartition(2).writeStream.format("twopc-file")
         .option("path", f"{work}/out").option("checkpointLocation", f"{work}/ck")
         .trigger(availableNow=True).start())
query.awaitTermination()
(spark.range(0, 10, numPartitions=2).selectExpr("id", "cast(id as string) AS payload", "id * 0.5 AS amount")
 .write.format("twopc-file").mode("append").option("path", f"{work}/batch").option("txnVersion", "1")
 .option("checkpointLocation", f"{work}/batch-ck").save())
assert spark.read.parquet(f"{work}/batch").count() == 10
spark.stop()
print("jvm", jvm, flush=True)
"""


def _spark_home() -> Path:
    """The Spark home PySpark starts its JVM from (``SPARK_HOME``, else the installed pyspark)."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home).absolute()
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "twopc-tests"


def spark_home_without_zips() -> Path:
    """A Spark home like the current one but without ``python/lib`` (see the module's
    docstring); the current one when it has no ``python/lib``."""
    real = _spark_home()
    if not (real / "python" / "lib").exists():
        return real
    real = real.resolve()
    home = _cache() / f"spark-home-{hashlib.sha256(str(real).encode()).hexdigest()[:16]}"
    if home.is_dir():
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    draft = Path(tempfile.mkdtemp(prefix=f"{home.name}.", dir=home.parent))
    for entry in real.iterdir():
        if entry.name != "python":
            (draft / entry.name).symlink_to(entry)
    (draft / "python").mkdir()
    for entry in (real / "python").iterdir():
        if entry.name != "lib":
            (draft / "python" / entry.name).symlink_to(entry)
    try:
        draft.rename(home)
    except OSError:  # another session made it meanwhile
        shutil.rmtree(draft)
    return home


def _java() -> Path | None:
    java_home = os.environ.get("JAVA_HOME")
    found = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    return Path(found).resolve() if found and os.access(found, os.X_OK) else None


def _archive_file() -> Path | None:
    """Where the archive of this Spark installation and Java is kept (None without a java)."""
    java = _java()
    jars = _spark_home() / "jars"
    if java is None or not jars.is_dir():
        return None
    key = hashlib.sha256()
    for part in (str(java), str(java.stat().st_mtime_ns), str(jars), str(jars.resolve())):
        key.update(part.encode() + b"\0")
    for jar in sorted(jars.iterdir()):
        key.update(f"{jar.name} {jar.stat().st_size}\0".encode())
    return _cache() / f"spark-classes-{key.hexdigest()[:16]}.jsa"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One maker of *path* at a time (two test sessions of one checkout)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _make(archive: Path) -> str:
    """Run :data:`_JOB` with ``-XX:ArchiveClassesAtExit``; '' when *archive* was made, else why not."""
    with tempfile.TemporaryDirectory(prefix="twopc-class-archive-") as work:
        Path(work, "in").mkdir()
        partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
        opts = " ".join([*JVM_OPTIONS, _QUIET, f"-XX:ArchiveClassesAtExit={partial}"])
        env = {**os.environ, "SPARK_SUBMIT_OPTS": opts, "PYSPARK_PYTHON": sys.executable,
               "PYSPARK_DRIVER_PYTHON": sys.executable}
        try:
            proc = subprocess.run([sys.executable, "-c", _JOB, work], env=env, cwd=work, capture_output=True,
                                  text=True, timeout=_BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"the job ran longer than {_BUILD_TIMEOUT_S:.0f}s"
        pids = [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("jvm ")]
        if proc.returncode != 0 or not pids:
            return f"the job failed (exit {proc.returncode}): {proc.stderr[-1500:]}"
        # the JVM writes the archive as it exits, after the Python driver closed its end
        if not _gone(pids[0], 120) or not partial.is_file() or partial.stat().st_size == 0:
            partial.unlink(missing_ok=True)
            return "the JVM wrote no archive"
        os.replace(partial, archive)
        return ""


def class_archive() -> Path | None:
    """The class-data-sharing archive of this Spark installation, made now if there is none
    (one Spark job); None when it cannot be made (the reason goes to stderr)."""
    archive = _archive_file()
    if archive is None:
        return None
    if archive.is_file():
        return archive
    with _locked(archive):
        if archive.is_file():
            return archive
        why = _make(archive)
    if why:
        print(f"twopc tests: Spark starts without a class-data-sharing archive: {why}", file=sys.stderr)
        return None
    return archive


def java_options(archive: Path | None, *, short_lived: bool = True) -> str:
    """The driver JVM options: :data:`JVM_OPTIONS` (unless not *short_lived*), and the archive
    when there is one."""
    return " ".join([*(JVM_OPTIONS if short_lived else ()),
                     *([_QUIET, f"-XX:SharedArchiveFile={archive}"] if archive else [])])


#: What :func:`use_fast_starts` added to ``SPARK_SUBMIT_OPTS``, and the archive it found.
_added: tuple[str, Path | None] | None = None


def use_fast_starts() -> str:
    """Give every Spark application this process starts from now on (and its children start)
    :func:`spark_home_without_zips` as ``SPARK_HOME`` and the options of :func:`java_options`
    in ``SPARK_SUBMIT_OPTS`` (after any already there); returns the options added."""
    global _added
    try:
        os.environ["SPARK_HOME"] = str(spark_home_without_zips())
        archive = class_archive()
    except OSError as exc:  # a cache folder that cannot be written: Spark starts as it would anyway
        print(f"twopc tests: Spark starts without the faster home and archive: {exc}", file=sys.stderr)
        archive = None
    added = java_options(archive)
    old = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if added not in old:
        os.environ["SPARK_SUBMIT_OPTS"] = f"{old} {added}".strip()
    _added = (added, archive)
    return added


@contextlib.contextmanager
def long_lived_driver() -> Iterator[None]:
    """Within the block, a Spark driver started here gets the archive but not the short-lived
    driver's JIT and GC (:data:`JVM_OPTIONS`): for the session's shared ``SparkSession``, which
    runs every Spark test of the session."""
    old = os.environ.get("SPARK_SUBMIT_OPTS")
    if _added is None or old is None or _added[0] not in old:
        yield
        return
    os.environ["SPARK_SUBMIT_OPTS"] = old.replace(_added[0], java_options(_added[1], short_lived=False))
    try:
        yield
    finally:
        os.environ["SPARK_SUBMIT_OPTS"] = old
