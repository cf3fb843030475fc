"""The crash matrix of ``twopc-jdbc``: a streaming query, in a subprocess, is killed at the
protocol's edges and restarted from the same checkpoint until its input is done.

The staging commit mode is the focus: each task attempt commits its rows into a staging
table (its *prepare*), and the driver moves the chosen attempts' rows into the target and
writes the batch marker in ONE local transaction, which is its own decision (the coordinator
commits first and records the ledger decision after: ``before_decision``,
``after_decision`` and ``after_mark`` bracket that commit). It runs against PostgreSQL and
against a SQLite file. The prepared mode through ``twopc-jdbc`` gets a smoke test (the full
PREPARE TRANSACTION matrix runs for ``twopc-postgres`` in ``test_chaos.py``).

``crash`` SIGKILLs the whole job (driver, JVM, Python workers: no cleanup runs); ``kill``
only the Python worker of one task attempt, which Spark retries. To keep the suite's time
budget, one job takes several faults, each in its own micro-batch (so each crash starts
from a clean state, like a crash-per-job matrix), and is restarted after every crash; a
job costs about one Spark start per crash plus one. After the job: every source id is in
the table exactly once, no staged row of the sink is left in any ``twopc_stage_*`` table
(no prepared transaction, in prepared mode), the ledger has no decided-but-unfinished
batch, every micro-batch has exactly one marker, and every planned fault fired.

Dropped on purpose, against PostgreSQL in staging mode: a ``before_pre_commit`` crash leaves
what a ``during_invoke`` crash leaves (an uncommitted local transaction, its COPY still open,
discarded when the connection dies), and an ``after_pre_commit`` crash what a
``before_decision`` crash leaves (committed staged attempts that no decision names, deleted
by the restart's recovery); SQLite runs ``after_pre_commit`` instead.
"""

from __future__ import annotations

import json
import urllib.parse
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

import faultinject
from recovery import staged_rows_left, verify_ids, verify_postgres_ids
from recovery.demos.demo import create_table, write_input
from twopc import CommitLedger

from ._chaos_helpers import fired, run_job_until_done

pytestmark = pytest.mark.chaos

ROWS = 30  # rows per input file = per micro-batch


@dataclass(frozen=True)
class Fault:
    point: str
    batch: int
    action: str = "crash"
    partition: int | None = None

    def spec(self) -> str:
        where = f"@batch={self.batch}" + (f"@partition={self.partition}" if self.partition is not None else "")
        return f"{self.point}{where}:{self.action}"


def _plan(faults: Sequence[Fault]) -> str:
    return ",".join(f.spec() for f in faults)


# One fault per micro-batch. The two task kills share the LAST batch: nothing may follow them,
# or a restart's (or the next micro-batch's) plan-time recovery, not the driver's sweep after
# the commit, would delete the killed attempt's staged orphan.
#   during_invoke: an uncommitted local transaction dies with its connection
#   after_pre_commit: some attempts staged and committed, no handle reached the driver
#   before_decision: every attempt staged and committed, no decision: recovery deletes them
#   after_decision: rows moved and batch marker written, no ledger decision: the replay must
#       find the marker (ALREADY_COMMITTED) and delete its own staged rows
#   after_mark: all done, Spark's commits/<batch> missing: the replay is ignored
KILLS = [Fault("during_invoke", 4, "kill", 0), Fault("after_pre_commit", 4, "kill", 1)]
PG_STAGING = (5, [Fault("during_invoke", 0), Fault("before_decision", 1), Fault("after_decision", 2),
                  Fault("after_mark", 3), *KILLS])
SQLITE_STAGING = (5, [Fault("after_pre_commit", 0), Fault("before_decision", 1), Fault("after_decision", 2),
                      Fault("after_mark", 3), *KILLS])
PG_PREPARED = (3, [Fault("between_commits", 1), Fault("after_decision", 2)])


def _jdbc_postgres_url(sa_url: str) -> str:
    """``jdbc:postgresql://host:port/db?user=..&password=..`` for a SQLAlchemy URL."""
    u = make_url(sa_url)
    query = urllib.parse.urlencode({"user": u.username or "", "password": u.password or ""},
                                   quote_via=urllib.parse.quote)
    return f"jdbc:postgresql://{u.host}:{u.port}/{u.database}?{query}"


def _run(tmp_path: Path, table: str, files: int, faults: Sequence[Fault], *, env: dict[str, str],
         args: Sequence[str]) -> tuple[faultinject.ChaosReport, list[int], CommitLedger]:
    """Write *files* input files, run the ``twopc-jdbc`` job under *faults* until it completes
    (asserted), and check the runs and the ledger: every fault fired, one crash per ``crash``
    fault, every batch committed, none decided but unfinished."""
    ids = write_input(tmp_path / "in", files, ROWS)
    ck = tmp_path / "ck"
    crashes = sum(f.action == "crash" for f in faults)
    report = run_job_until_done(
        ["recovery.demos.demo", "job", "--input", str(tmp_path / "in"), "--checkpoint", str(ck), "--table", table,
         "--format", "twopc-jdbc", *args],
        env, tmp_path / "faults", _plan(faults), max_restarts=crashes + 1, timeout_s=180 * (crashes + 1))
    summary = report.summary() + "\nfired:\n" + "\n".join(report.fired)
    for f in faults:
        assert fired(report, f.point), f"{f.spec()} did not fire\n{summary}"
        assert any(f" {f.point} ({f.action}) batch={f.batch} " in line for line in report.fired), \
            f"{f.spec()} did not fire\n{summary}"
    assert report.crashes == crashes and len(report.runs) == crashes + 1, summary
    ledger = CommitLedger(str(ck))
    assert ledger.recorded_sink_id(), summary
    assert ledger.pending() == [], summary
    assert ledger.committed_batches() == list(range(files)), summary
    return report, ids, ledger


def _handle_kinds(ledger: CommitLedger) -> set[str]:
    """The handle kinds of every recorded decision (which commit mode really ran)."""
    folder = Path(ledger.location) / "decisions"
    return {h["kind"] for f in folder.glob("*.json") for h in json.loads(f.read_text())["handles"]}


def _assert_staging_exactly_once(engine: sa.Engine, table: str, ids: list[int], files: int,
                                 ledger: CommitLedger, report: faultinject.ChaosReport) -> None:
    sink_id = ledger.recorded_sink_id()
    assert sink_id is not None
    result = verify_ids(engine, table, ids)
    assert result.ok, report.summary() + "\n" + result.render()
    left = staged_rows_left(engine, sink_id=sink_id)
    assert left and sum(left.values()) == 0, f"staged rows left behind: {left}\n{report.summary()}"
    assert _handle_kinds(ledger) == {"twopc.staging"}, _handle_kinds(ledger)
    # exactly one batch marker per micro-batch, and their row counts add up to the input
    with engine.connect() as conn:
        markers: dict[int, int] = dict(conn.execute(
            sa.text("SELECT batch_id, rows FROM twopc_batches WHERE sink_id = :s"), {"s": sink_id}).all())
    assert sorted(markers) == list(range(files)) and sum(markers.values()) == len(ids), markers


def test_staging_postgres_crashes_and_kills_then_restart_is_exactly_once(postgres_url, tmp_path) -> None:
    files, faults = PG_STAGING
    table = f"jchaos_{uuid.uuid4().hex[:10]}"
    create_table(postgres_url, table)
    # the URL (with its password) goes through the environment, not the command line
    report, ids, ledger = _run(tmp_path, table, files, faults,
                               env={"TWOPC_DEMO_URL": _jdbc_postgres_url(postgres_url)},
                               args=["--option", "commitMode=staging"])
    engine = sa.create_engine(postgres_url)
    try:
        _assert_staging_exactly_once(engine, table, ids, files, ledger, report)
        # staging never prepares: nothing of the sink in pg_prepared_xacts either
        assert verify_postgres_ids(engine, table, ids, sink_id=ledger.recorded_sink_id()).dangling == ()
    finally:
        engine.dispose()


def test_staging_sqlite_crashes_and_kills_then_restart_is_exactly_once(tmp_path) -> None:
    files, faults = SQLITE_STAGING
    db = tmp_path / "target.db"
    engine = sa.create_engine(f"sqlite:///{db}")
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE events (id INTEGER NOT NULL, payload TEXT, amount REAL)")
        report, ids, ledger = _run(tmp_path, "events", files, faults, env={},
                                   args=["--url", f"jdbc:sqlite:{db}", "--option", "commitMode=staging"])
        _assert_staging_exactly_once(engine, "events", ids, files, ledger, report)
    finally:
        engine.dispose()


def test_prepared_postgres_crashes_then_restart_is_exactly_once(postgres_url, tmp_path) -> None:
    files, faults = PG_PREPARED
    table = f"jchaos_{uuid.uuid4().hex[:10]}"
    create_table(postgres_url, table)
    report, ids, ledger = _run(tmp_path, table, files, faults,
                               env={"TWOPC_DEMO_URL": _jdbc_postgres_url(postgres_url)},
                               args=["--option", "commitMode=prepared"])
    engine = sa.create_engine(postgres_url)
    try:
        result = verify_postgres_ids(engine, table, ids, sink_id=ledger.recorded_sink_id())
    finally:
        engine.dispose()
    # ok includes: no prepared transaction of the sink left in pg_prepared_xacts
    assert result.ok, report.summary() + "\n" + result.render()
    assert _handle_kinds(ledger) == {"twopc.postgres"}, _handle_kinds(ledger)
