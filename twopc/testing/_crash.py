"""The crash matrix: a streaming query into the sink in a subprocess (``python -m twopc.testing.job``), SIGKILLed at
every fault point and restarted until its input is done, then checked for exactly-once."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import sysconfig
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from twopc import faultinject

from .._context import TransactionContext
from .._errors import redact
from .._sink import BatchCommit, CommitShape, capability
from ..ledger._ledger import CommitLedger
from ._harness import ContractViolation, SinkHarness
from ._run import few

__all__ = ["DEFAULT_SPARK_CONF", "EXECUTOR_POINTS", "CrashMatrixResult", "Fault", "cluster_crash_plan", "crash_plan",
           "run_crash_matrix"]

CHECK = "crash_matrix"

#: The fault points that fire in an executor's Python worker (the rest fire in the driver).
EXECUTOR_POINTS = frozenset({"during_invoke", "before_pre_commit", "after_pre_commit"})


@dataclass(frozen=True)
class Fault:
    """One rule of the plan: ``crash`` kills the whole job, ``kill`` one task attempt's Python worker
    (Spark retries it)."""

    point: str
    batch: int | None
    action: str = "crash"
    partition: int | None = None

    def spec(self) -> str:
        where = "" if self.batch is None else f"@batch={self.batch}"
        where += "" if self.partition is None else f"@partition={self.partition}"
        return f"{self.point}{where}:{self.action}"

    def fired_in(self, lines: Sequence[str]) -> bool:
        batch = f" batch={self.batch} " if self.batch is not None else " "
        return any(f" {self.point} ({self.action}){batch}" in line for line in lines)


def crash_plan(*, atomic: bool, one_call: bool = False) -> list[Fault]:
    """One crash per micro-batch at every fault point the sink's commit path reaches, then two task kills sharing the
    last batch (nothing may follow them: a later plan-time recovery, not the driver's sweep, would remove the killed
    attempt's orphan). *atomic* sinks never reach ``between_commits`` and ``after_commit``, and their
    ``during_recovery`` fires in the first restart that rolls back staged attempts; others crash inside the recovery
    of the batch decided before the ``after_decision`` crash. *one_call* sinks (Redis) skip ``between_commits`` only."""
    commits = [] if atomic else ([] if one_call else ["between_commits"]) + ["after_commit"]
    driver = ["before_decision", "after_decision", *commits]
    points = ["during_invoke", "before_pre_commit", "after_pre_commit", *driver, "after_mark"]
    plan = [Fault(p, b) for b, p in enumerate(points)]
    decided = points.index("after_decision")
    plan.insert(decided + 1, Fault("during_recovery", None if atomic else decided))
    last = len(points)
    return [*plan, Fault("during_invoke", last, "kill", 0), Fault("after_pre_commit", last, "kill", 1)]


def cluster_crash_plan() -> list[Fault]:
    """The plan on a real cluster (``run_crash_matrix(master=...)``): an executor JVM killed while writing (batch 0)
    and after preparing (batch 1: its orphan is swept), the driver after its decision (batch 2: the new application
    finishes it), a Python worker after preparing (batch 3). One job restart: every JVM costs seconds."""
    return [Fault("during_invoke", 0), Fault("after_pre_commit", 1), Fault("after_decision", 2),
            Fault("after_pre_commit", 3, "kill", 0)]


@dataclass
class CrashMatrixResult:
    """What a run did: the chaos report, sink id, input ids, micro-batches, checkpoint, and each
    run's partitions and fired faults."""

    report: faultinject.ChaosReport
    sink_id: str
    ids: list[int]
    batches: int
    checkpoint: str
    partitions: list[int] = field(default_factory=list)
    fired: list[list[str]] = field(default_factory=list)
    seconds: float = 0.0

    def __repr__(self) -> str:  # the report's stderr tails could hold what a broken sink leaked
        return f"CrashMatrixResult(sink_id={self.sink_id!r}, runs={len(self.report.runs)}, ids={len(self.ids)})"

    def summary(self) -> str:
        """One line per run: partitions, how it ended, the faults it fired."""
        lines = [(f"{len(self.report.runs)} run(s), {self.report.crashes} crash(es), {self.seconds:.0f}s, "
                 f"{len(self.ids)} ids in {self.batches} micro-batches, sink id {self.sink_id}")]
        for i, run in enumerate(self.report.runs):
            parts = self.partitions[i] if i < len(self.partitions) else "?"
            what = "; ".join(x.split("firing ", 1)[-1] for x in self.fired[i]) if i < len(self.fired) else ""
            lines.append(f"  run {i + 1}: {parts} partitions, {run.describe()}  {what}")
        return "\n".join(lines)


def _commit_shape(harness: SinkHarness, probe_id: int) -> tuple[bool, bool]:
    """Whether the sink commits atomically, and in one call: prepare a row, ask, roll back."""
    sink = harness.new_sink()
    try:
        sid = f"kitprobe{os.getpid()}{int(time.time() * 1000) % 10**8}"
        txn = sink.begin_transaction(TransactionContext(sid, 0, 0, 1))
        sink.invoke_batch(txn, harness.rows([probe_id]))
        h = sink.pre_commit(txn)
        try:
            shape = capability(sink, BatchCommit).commit_shape([h])
            local = shape is CommitShape.LOCAL_TRANSACTION
            return local, local or shape is CommitShape.ONE_CALL
        finally:
            sink.abort(h)
    finally:
        sink.close()


def _write_input(folder: Path, harness: SinkHarness, files: int, rows: int, base: int) -> list[int]:
    """One Parquet file per micro-batch, modification times a second apart (oldest read first)."""
    folder.mkdir(parents=True)
    ids: list[int] = []
    start = time.time() - files
    for f in range(files):
        chunk = list(range(base + f * rows, base + (f + 1) * rows))
        ids += chunk
        tmp, final = folder / f".part-{f:05d}.parquet.tmp", folder / f"part-{f:05d}.parquet"
        pq.write_table(pa.Table.from_batches([harness.rows(chunk)]), tmp)
        os.utime(tmp, (start + f, start + f))
        tmp.rename(final)
    return ids


def _python_path() -> str:
    """``sys.path`` outside the interpreter's own folders, for the job and Spark's workers."""
    own = {os.path.realpath(p) for k in ("stdlib", "platstdlib", "purelib", "platlib")
           if (p := sysconfig.get_paths().get(k))}
    paths = (os.path.realpath(entry or os.getcwd()) for entry in sys.path)
    extra = [p for p in paths if os.path.isdir(p) and not any(p == o or p.startswith(o + os.sep) for o in own)]
    old = os.environ.get("PYTHONPATH")
    return os.pathsep.join(dict.fromkeys([*extra, *([old] if old else [])]))


def run_job(harness: SinkHarness, work: Path, module: str, plan: str | faultinject.FaultPlan, *, env: Mapping[str, str],
            partitions: Sequence[int], tail_lines: int, extra: Mapping[str, Any],
            **run: Any) -> faultinject.ChaosReport:
    """Run ``python -m <module> <spec>`` under a :class:`twopc.faultinject.ChaosRunner` until done; the
    spec (with the options) is a 0600 file deleted afterwards, never a command line."""
    from pyspark.sql.pandas.types import from_arrow_schema
    spec_path = work / "job.json"
    spec = {"sink": harness.sink_path(), "format": harness.format_name, "options": harness.sink_options(),
            "schema": from_arrow_schema(harness.schema).jsonValue(), "input": str(work / "in"),
            "checkpoint": str(work / "ck"), "partitions": list(partitions), "runs_file": str(work / "runs.txt"),
            **extra}
    fd = os.open(spec_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(spec, f)
    try:
        with open(os.devnull, "wb") as devnull:
            runner = faultinject.ChaosRunner(env=env, cwd=work, state_dir=work / "faults", stdout=devnull,
                                             tail_lines=tail_lines)
            return runner.run_until_done([sys.executable, "-m", module, str(spec_path)], plan, **run)
    finally:
        with contextlib.suppress(FileNotFoundError):
            spec_path.unlink()


def not_exactly_once(harness: SinkHarness, want: set[int], lo: int, hi: int) -> tuple[set[int], set[int], set[int]]:
    """The ids in ``[lo, hi)`` read back lost, duplicated and never written."""
    seen = Counter(i for i in (int(x) for x in harness.read_ids()) if lo <= i < hi)
    return want - set(seen), {i for i, n in seen.items() if n > 1}, set(seen) - want


def left_prepared(harness: SinkHarness, sink_id: str) -> list[Any]:
    """What a fresh sink of *harness* lists as prepared under *sink_id*."""
    sink = harness.new_sink()
    try:
        return list(sink.list_prepared(sink_id))
    finally:
        sink.close()


#: The job's default Spark settings: C1 JIT and serial GC start a short-lived JVM ~2 s faster.
DEFAULT_SPARK_CONF: Mapping[str, str] = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


def run_crash_matrix(harness: SinkHarness, workdir: str | os.PathLike[str], *,
                     plan: Sequence[Fault] | None = None, rows_per_batch: int = 20,
                     partitions: Sequence[int] = (2, 3, 4), run_timeout_s: float = 240.0,
                     spark_conf: Mapping[str, str] | None = None, master: str | None = None) -> CrashMatrixResult:
    """Run the crash matrix for *harness* in *workdir* (an empty folder) and verify it.

    The job streams one input file per micro-batch with ``repartition(n)``, *n* cycling through
    *partitions* per run, so replays are partitioned differently; options reach it in a 0600 file.
    It costs one Spark start per crash plus one. *spark_conf* adds to the session (default
    :data:`DEFAULT_SPARK_CONF`), e.g. ``spark.jars``. *master* runs on a cluster
    (``spark://host:port``, e.g. :class:`twopc.faultinject.LocalSparkCluster`), where a ``crash`` at
    one of :data:`EXECUTOR_POINTS` kills the executor only (:func:`cluster_crash_plan`).

    Guarantees on return: the job completed; every fault fired and each job-killing ``crash`` crashed it once; every
    input id is visible exactly once; ``list_prepared(sink_id)`` is empty; the ledger has every batch committed;
    ``verify`` passed; no secret is in the checkpoint or the job's stderr.
    Raises ContractViolation: any of that is not so (the message has the runs' summary)."""
    work = Path(workdir)
    base = int(time.time() * 1000) % 10**9 * 1000
    if plan is None:
        atomic, one_call = _commit_shape(harness, base - 1)
        plan = crash_plan(atomic=atomic, one_call=one_call)
    chosen = list(plan)
    files = max(f.batch for f in chosen if f.batch is not None) + 1
    ids = _write_input(work / "in", harness, files, rows_per_batch, base)
    ck, runs_file = work / "ck", work / "runs.txt"
    # the faults that kill the whole job: every crash but, on a cluster, an executor's
    crashes = sum(f.action == "crash" and not (master is not None and f.point in EXECUTOR_POINTS) for f in chosen)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PYTHONPATH": _python_path()}
    fired: list[list[str]] = []
    started = time.monotonic()
    report = run_job(harness, work, "twopc.testing.job", ",".join(f.spec() for f in chosen), env=env,
                     partitions=partitions, tail_lines=300,
                     extra={"spark_conf": dict(DEFAULT_SPARK_CONF if spark_conf is None else spark_conf),
                            "master": master},
                     max_restarts=crashes + 1, timeout_s=run_timeout_s * (crashes + 2),
                     on_run_end=lambda _run, lines: fired.append(list(lines)))
    partitions_run = ([int(line.split()[1]) for line in runs_file.read_text().splitlines() if line.strip()]
                      if runs_file.exists() else [])
    result = CrashMatrixResult(report, "", ids, files, str(ck), partitions_run, fired, time.monotonic() - started)
    _verify(harness, result, chosen, ck, files, varied=len(set(partitions)) > 1, crashes=crashes)
    return result


def _verify(harness: SinkHarness, result: CrashMatrixResult, plan: Sequence[Fault], ck: Path, files: int, *,
            varied: bool, crashes: int) -> None:
    __tracebackhide__ = True
    secrets = sorted(harness.secret_strings(), key=len, reverse=True)  # a secret before its parts
    def fail(message: str) -> None:
        __tracebackhide__ = True
        text = f"{harness.label}: {message}\n{result.summary()}"
        raise ContractViolation(CHECK, redact(text, secrets))
    report = result.report
    if any(s in run.stderr_tail for run in report.runs for s in secrets):
        fail("a credential from the sink's options appears in the job's stderr")
    if not report.completed:
        tail = "\n".join(report.runs[-1].stderr_tail.splitlines()[-40:])
        fail("the job did not complete; last stderr lines:\n" + tail)
    if missing := [f.spec() for f in plan if not f.fired_in(report.fired)]:
        fail(f"faults {missing} never fired: the plan does not test what it says")
    if report.crashes != crashes or len(report.runs) != crashes + 1:
        fail(f"expected {crashes} crashes and {crashes + 1} runs: a run failed on its own")
    parts = result.partitions
    for i, lines in enumerate(result.fired):
        crashed_after_decision = any(" after_decision (crash)" in line for line in lines)
        if varied and crashed_after_decision and parts[i] in parts[i + 1:i + 3]:
            fail("the runs after the after_decision crash were not partitioned differently")
    ledger = CommitLedger(str(ck))
    sid = ledger.recorded_sink_id() or ""
    result.sink_id = sid
    if ledger.pending() or ledger.committed_batches() != list(range(files)):
        fail(f"the ledger has pending batches {[d.batch_id for d in ledger.pending()]} and committed "
             f"{ledger.committed_batches()}, expected 0..{files - 1} committed")
    lost, dup, extra = not_exactly_once(harness, set(result.ids), min(result.ids), max(result.ids) + 1)
    if lost or dup or extra:
        fail(f"not exactly once: lost {few(lost)}, duplicated {few(dup)}, unexpected {few(extra)}")
    if left := left_prepared(harness, sid):
        fail(f"transactions left prepared: {few(h.txn_id for h in left)}")
    if harness.verify is not None:
        try:
            harness.verify(sid)
        except AssertionError as exc:
            fail(f"the harness's verify({sid!r}) failed: {exc}")
    for path in ck.rglob("*"):
        if path.is_file() and any(s.encode() in path.read_bytes() for s in secrets):
            fail(f"a credential from the sink's options is in the checkpoint file {path.relative_to(ck)}")

