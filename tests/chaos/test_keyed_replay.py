"""A write killed right after its decision restarts on a table keyed on the source id, for
every sink that writes rows, through Spark.

After such a crash the restart's plan finishes the decided batch, and Spark, whose commit log
lacks it, replays the batch with the same id: the replay must write nothing (its tasks know at
plan time that the batch is committed), or every task meets the rows it committed and the table's
key refuses them, on every restart.

One Spark driver (``tests/_keyed_job.py``) runs every write at once: streaming queries into
``twopc-postgres``; ``twopc-jdbc`` in prepared, staging and auto mode on PostgreSQL and in
prepared (XA) mode on MariaDB; the MariaDB XA sink; ``twopc-composite`` over a PostgreSQL and a
MariaDB table; ``twopc-jdbc`` with ``upsertKeys``; a batch write with ``txnVersion``; and the
README's first quickstart as written. The fault plan holds each write right after it recorded
its decision of batch 1 (``txnVersion`` 1) and, at the last one, crashes the job (driver, JVM,
Python workers): every write is killed between its decision and its commit (a staging commit is
its own decision: it has committed and not yet recorded it). The same job then runs again
without faults and must complete every write with each row exactly once. Two Spark starts for
all of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import redis
from sqlalchemy.engine import make_url

from twopc import CommitLedger
from twopc.faultinject import read_firings
from twopc.spi.operations import BatchState
from twopc.testing import SinkHarness
from twopc.testing._crash import _write_input

from tests._composite_helpers import composite_harness
from tests._doc_blocks import block_under, substitutions
from tests._fault_helpers import REPO, child_env
from tests._kit_harnesses import jdbc_harness, mysql_xa_harness, postgres_harness
from tests._paths import REPO_ROOT

pytestmark = pytest.mark.chaos

README_QUICKSTART = "## Quickstart: a Redis Stream into PostgreSQL, streaming"
BATCH = 1
"""The batch each write is killed in (batch 0 is committed everywhere first)."""

#: Each write: how its keyed harness is made from (PostgreSQL, MariaDB) URLs, its extra options,
#: and whether it is a batch write.
WRITES: dict[str, tuple[Callable[[str, str], contextlib.AbstractContextManager[SinkHarness]], dict[str, str], bool]] = {
    "postgres": (lambda pg, _my: postgres_harness(pg, keyed=True), {}, False),
    "jdbc_prepared": (lambda pg, _my: jdbc_harness(pg, "postgresql", "prepared", keyed=True), {}, False),
    "jdbc_staging": (lambda pg, _my: jdbc_harness(pg, "postgresql", "staging", keyed=True), {}, False),
    "jdbc_auto": (lambda pg, _my: jdbc_harness(pg, "postgresql", "auto", keyed=True), {}, False),
    "jdbc_mariadb_xa": (lambda _pg, my: jdbc_harness(my, "mariadb", "prepared", keyed=True), {}, False),
    "mysql_xa": (lambda _pg, my: mysql_xa_harness(my, keyed=True), {}, False),
    "composite": (lambda pg, my: composite_harness(["orders", "xa"], postgres_url=pg, mariadb_url=my, keyed=True),
                  {}, False),
    "jdbc_upsert": (lambda pg, _my: jdbc_harness(pg, "postgresql", "staging", keyed=True), {"upsertKeys": "id"},
                    False),
    "batch_txn_version": (lambda pg, _my: postgres_harness(pg, keyed=True), {}, True),
}
#: The writes whose commit is one local transaction that decides by itself (staging): it commits,
#: then records its decision, so the crash leaves no decision of the batch.
ATOMIC = {"jdbc_staging", "jdbc_upsert"}


@dataclass
class KeyedRun:
    """What the two runs of the job left: each write's harness, the input ids, the checkpoints,
    each ledger's state of batch 1 after the crash, each write's error in the restart (None: it
    completed), the restart's stdout, and where the README's quickstart wrote."""

    harnesses: dict[str, SinkHarness]
    ids: list[int]
    checkpoints: Path
    crashed: dict[str, BatchState]
    errors: dict[str, str | None]
    stdout: str
    readme_pg: str
    readme_redis: str


def _cause(error: str) -> str:
    """The line of a write's error that says what failed (twopc's, else the first error line)."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    for pattern in (r"\bSinkError: ", r"\b\w+Error: "):
        found = [line for line in lines if re.search(pattern, line)]
        if found:
            return found[0][:600]
    return lines[0][:600] if lines else error


@contextlib.contextmanager
def _readme_targets(postgres_url: str, redis_url: str, folder: Path) -> Iterator[tuple[str, str]]:
    """Where the README's quickstart writes (its table and stream names are fixed): the suite's
    PostgreSQL, its table dropped before and after, and a Redis database of its own; its
    checkpoint goes in *folder*."""
    pg = make_url(postgres_url).set(drivername="postgresql").render_as_string(hide_password=False)
    rs = urllib.parse.urlsplit(redis_url)._replace(path="/9").geturl()
    client = redis.Redis.from_url(rs)

    def clean(checkpoint: Path | None = None) -> None:
        client.delete("shop-orders")
        with psycopg.connect(pg, autocommit=True) as db:
            sink_id = CommitLedger(str(checkpoint)).recorded_sink_id() if checkpoint is not None else None
            if sink_id is not None:  # a run that failed may leave its batch prepared, holding the table
                for (gid,) in db.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
                                         "AND starts_with(gid, %s)", (f"twopc:{sink_id}:",)).fetchall():
                    db.execute(f"ROLLBACK PREPARED '{gid}'")
            db.execute("SET lock_timeout = '10s'")
            db.execute("DROP TABLE IF EXISTS shop_orders")

    clean()
    try:
        yield pg, rs
    finally:
        clean(folder / "twopc-quickstart-orders")
        client.close()


def _run_job(spec: Path, work: Path, faults: dict[str, str]) -> tuple[int, str, str]:
    """One run of the job: its exit status, stdout, and what it said of its writes on stderr (the
    failures of ``tests._keyed_job`` and the fault plan's, then the tail). With *faults* (the
    crash), a write that fails ends it at once."""
    env = child_env(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, TMPDIR=str(work), **faults)
    with open(work / "stderr.txt", "w+", encoding="utf-8") as err:
        done = subprocess.run([sys.executable, "-m", "tests._keyed_job", str(spec),
                               *(["--fail-fast"] if faults else [])], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=err, text=True, timeout=1200, start_new_session=True, check=False)
        err.seek(0)
        lines = err.read().splitlines()
    said = [line[:2000] for line in lines if line.startswith(("keyed job:", "faultinject:"))]
    return done.returncode, done.stdout, "\n".join([*said, "...", *lines[-30:]])


@pytest.fixture(scope="module")
def keyed(postgres_url: str, mariadb_url: str, redis_url: str,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeyedRun]:
    work = tmp_path_factory.mktemp("keyed")
    with contextlib.ExitStack() as stack:
        harnesses = {name: stack.enter_context(make(postgres_url, mariadb_url))
                     for name, (make, _, _) in WRITES.items()}
        readme_pg, readme_redis = stack.enter_context(_readme_targets(postgres_url, redis_url, work))
        readme = block_under(REPO_ROOT / "README.md", README_QUICKSTART).code
        for placeholder, real in substitutions(readme_pg, readme_redis, work):
            readme = readme.replace(placeholder, real)
        ids = _write_input(work / "in", harnesses["postgres"], 3, 10, 10_000 * (os.getpid() % 10_000))
        checkpoints = work / "ck"
        writes = [{"name": name, "sink": harnesses[name].sink_path(), "format": harnesses[name].format_name,
                   "options": {**harnesses[name].sink_options(), **extra}, "batch": batch}
                  for name, (_, extra, batch) in WRITES.items()]
        spec = work / "job.json"
        fd = os.open(spec, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"input": str(work / "in"), "checkpoints": str(checkpoints), "writes": writes,
                       "readme": readme, "results": str(work / "results.json")}, f)
        held = len(writes)  # and the README's query: the last of them crashes the job
        plan = f"after_decision@batch={BATCH}:hold*{held},after_decision@batch={BATCH}:crash"
        code, _, said = _run_job(spec, work, {"TWOPC_FAULTS": plan, "TWOPC_FAULT_STATE": str(work / "faults")})
        fired = read_firings(work / "faults")
        assert code == -signal.SIGKILL and len(fired) == held + 1, f"exit {code}, fired {len(fired)}\n{said}"
        ledgers = {**{name: checkpoints / name for name in WRITES}, "readme": work / "twopc-quickstart-orders"}
        crashed = {name: CommitLedger(str(ck)).state(BATCH) for name, ck in ledgers.items()}
        code, stdout, said = _run_job(spec, work, {})
        assert code == 0, f"exit {code}\n{said}"
        errors = json.loads((work / "results.json").read_text())
        yield KeyedRun(harnesses, ids, checkpoints, crashed, errors, stdout, readme_pg, readme_redis)


@pytest.mark.parametrize("name", list(WRITES))
def test_a_write_killed_after_its_decision_restarts_on_a_keyed_table(keyed: KeyedRun, name: str) -> None:
    expected = BatchState.UNDECIDED if name in ATOMIC else BatchState.DECIDED
    assert keyed.crashed[name] is expected, f"{name}: batch {BATCH} was {keyed.crashed[name].name} after the crash"
    error = keyed.errors[name]
    assert error is None, f"{name}: the restart failed: {_cause(error)}"
    harness = keyed.harnesses[name]
    seen = Counter(harness.read_ids())
    assert seen == Counter(keyed.ids), f"{name}: not every id once: {sorted(seen.items())[:10]}"
    ledger = CommitLedger(str(keyed.checkpoints / name))
    assert ledger.pending() == [] and BATCH in ledger.committed_batches()
    sink_id = ledger.recorded_sink_id()
    assert sink_id is not None and harness.verify is not None
    harness.verify(sink_id)


def test_the_readme_streaming_quickstart_restarts_after_a_crash_after_its_decision(keyed: KeyedRun) -> None:
    """The README's first quickstart, as written, killed after its decision of batch 1 and run
    again: it completes, and its table (``UNIQUE (stream, id)``) holds every entry of the stream
    (the first run's 1000 and the second's 1000) once."""
    assert keyed.crashed["readme"] is BatchState.DECIDED, keyed.crashed["readme"]
    error = keyed.errors["readme"]
    assert error is None, f"the README's quickstart failed on restart: {_cause(error)}"
    assert "(2000, 999000)" in keyed.stdout.splitlines(), keyed.stdout
    client = redis.Redis.from_url(keyed.readme_redis, decode_responses=True)
    try:
        entries = [("shop-orders", eid) for eid, _fields in client.xrange("shop-orders") or []]
    finally:
        client.close()
    with psycopg.connect(keyed.readme_pg) as db:
        rows = [(s, i) for s, i in db.execute("SELECT stream, id FROM shop_orders")]
    assert len(entries) == 2000 and Counter(rows) == Counter(entries)
