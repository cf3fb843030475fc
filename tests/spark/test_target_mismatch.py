"""A write pointed at another target than the one its checkpoint's decided batch was prepared in
(a typo, a moved server, another database) is refused as a different target, naming both, before
anything is recorded; nothing calls the batch lost and the checkpoint keeps its target. The same
server reached under another name (``localhost`` for ``127.0.0.1``) is the same target: the
servers say what they are. Against the real PostgreSQL (two databases on one server)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from twopc import CommitCoordinator, CommitLedger, RecoveryCoordinator, TransactionContext, TransactionLostError, sinks
from twopc.sinks import FileSink, MySqlXaSink, PostgresHandle, PostgresSink
from twopc.sinks.sql import dispose_engines
from twopc.spi import TargetMismatchError
from twopc.spi.lease import default_sink_id
from twopc.spi.operations import BatchState

from tests._filesink_helpers import crash_commit, run_task
from tests._paths import REPO_ROOT

REPO = REPO_ROOT
SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string())])


@pytest.fixture
def two_databases(postgres_url: str, postgres_server: Any) -> Iterator[tuple[str, str, str]]:
    """(URL of database A, URL of database B on the same server, a table name in both)."""
    name = f"tm_{uuid.uuid4().hex[:10]}"
    # a superuser makes database B for twopc's user; on a server given by TWOPC_TEST_PG_URL that user must be
    # allowed to (else this fails loudly)
    admin = postgres_server.admin_dsn if postgres_server is not None else make_url(postgres_url).set(
        drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name} OWNER {make_url(postgres_url).username}")
    url_a = postgres_url
    url_b = make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    table = f"t_{uuid.uuid4().hex[:8]}"
    engines = [sa.create_engine(u) for u in (url_a, url_b)]
    for e in engines:
        with e.begin() as c:
            c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL, payload text)")
    try:
        yield url_a, url_b, table
    finally:
        for e in engines:
            e.dispose()
        dispose_engines()
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _ids(url: str, table: str) -> list[int]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            return sorted(r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table}"))
    finally:
        engine.dispose()


def _crash_after_decision(url: str, table: str, ck: str, tmp: Path) -> tuple[str, list[PostgresHandle]]:
    """A driver (the core API) prepares batch 0 in *url*'s database and dies after its decision."""
    sink_id = default_sink_id(ck)
    ledger = CommitLedger(ck)
    ledger.bind_sink_id(None, default=sink_id)
    sink = PostgresSink(url, table)
    sink.validate(SCHEMA)
    handles = []
    for p in range(2):
        txn = sink.begin_transaction(TransactionContext(sink_id, 0, p, p))
        sink.invoke(txn, {"id": p, "payload": f"a{p}"})
        handles.append(sink.pre_commit(txn))
    crash_commit(CommitCoordinator(sink, ledger, sink_id), "after_decision", 0, handles, tmp / "f")
    sink.close()
    return sink_id, handles


def _ledger_files(ck: str) -> dict[str, bytes]:
    root = Path(ck, "twopc")
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "twopc.recovery", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ})


def _refusal(a: str, b: str) -> str:
    return (rf"(?s)belongs to a write to \[postgresql [^]]*/{a} table [^]]*\].*this write goes to "
            rf"\[postgresql [^]]*/{b} table .*Batch\(es\) \[0\] are decided.*wait prepared in .*Point this "
            rf"write back")


def test_a_write_to_another_database_is_refused_and_the_batch_commits_in_its_own(
        spark, two_databases, tmp_path) -> None:
    url_a, url_b, table = two_databases
    db_a, db_b = (str(make_url(u).database) for u in (url_a, url_b))
    ck = str(tmp_path / "ck")
    sink_id, handles = _crash_after_decision(url_a, table, ck, tmp_path)
    sinks.register_all(spark)

    def write(url: str, host: str | None = None) -> None:
        u = make_url(url)
        (spark.range(10, 14, numPartitions=2).selectExpr("id", "concat('b', id) AS payload")
         .write.format("twopc-jdbc").mode("append")
         .option("url", f"jdbc:postgresql://{host or u.host}:{u.port}/{u.database}").option("dbtable", table)
         .option("user", u.username).option("password", u.password)
         .option("checkpointLocation", ck).option("txnVersion", "1").save())

    before = _ledger_files(ck)
    assert "target.json" in before  # the core API records the target with its first decision
    with pytest.raises(Exception, match=_refusal(db_a, db_b)) as err:
        write(url_b)
    assert "TargetMismatchError" in str(err.value) and "neither prepared nor committed" not in str(err.value)
    assert str(make_url(url_a).password) not in str(err.value)
    assert _ledger_files(ck) == before  # nothing recorded: target.json unchanged, no owner epoch
    out = _cli("recover", "--checkpoint", ck, "--format", "twopc-postgres", "--option", f"url={url_b}",
               "--option", f"dbtable={table}")
    assert out.returncode == 3 and "TransactionLost" not in out.stderr and "this write goes to" in out.stderr
    assert _ledger_files(ck) == before
    pg = PostgresSink(url_a, table)
    assert sorted(h.txn_id for h in pg.list_prepared(sink_id)) == sorted(h.txn_id for h in handles)
    assert _ids(url_a, table) == [] and _ids(url_b, table) == []

    write(url_a, host="localhost")  # the same server under another name: the same target
    assert _ids(url_a, table) == [0, 1, 10, 11, 12, 13] and _ids(url_b, table) == []
    assert CommitLedger(ck).state(0) is BatchState.COMMITTED and pg.list_prepared(sink_id) == []
    assert f"/{db_a} table" in (CommitLedger(ck).recorded_target() or "")
    pg.close()


def test_recovery_against_another_database_is_refused_and_an_alias_is_the_same_target(
        two_databases, tmp_path) -> None:
    url_a, url_b, table = two_databases
    ck = str(tmp_path / "ck")
    sink_id, _handles = _crash_after_decision(url_a, table, ck, tmp_path)
    before = _ledger_files(ck)
    with PostgresSink(url_b, table) as wrong, pytest.raises(TargetMismatchError, match=r"Batch\(es\) \[0\]"):
        RecoveryCoordinator(wrong, CommitLedger(ck), sink_id=sink_id).run()
    with PostgresSink(url_b, table) as wrong, pytest.raises(TargetMismatchError):
        CommitCoordinator(wrong, CommitLedger(ck), sink_id)
    assert _ledger_files(ck) == before
    alias = make_url(url_a).set(host="localhost").render_as_string(hide_password=False)
    with PostgresSink(alias, table) as same:
        assert RecoveryCoordinator(same, CommitLedger(ck), sink_id=sink_id).run().finished_batches == [0]
    assert _ids(url_a, table) == [0, 1]
    assert "127.0.0.1" in (CommitLedger(ck).recorded_target() or "")  # the record is the first write's


def test_a_checkpoint_without_a_recorded_target_does_not_call_the_batch_lost(two_databases, tmp_path) -> None:
    """A checkpoint of an older twopc (no target.json) with a decided batch: the write to another
    database records nothing, and its error says the batch may wait in another target."""
    url_a, url_b, table = two_databases
    ck = str(tmp_path / "ck")
    sink_id, _handles = _crash_after_decision(url_a, table, ck, tmp_path)
    Path(ck, "twopc", "target.json").unlink()  # as an older twopc left it
    with PostgresSink(url_b, table) as wrong, pytest.raises(
            TransactionLostError, match=r"does not record which target.*nothing is lost: point the write back"):
        wrong.validate(SCHEMA)  # as a write to it would
        RecoveryCoordinator(wrong, CommitLedger(ck), sink_id=sink_id).run()
    ledger = CommitLedger(ck)
    ledger.bind_target(PostgresSink(url_b, table).target_identity(), sink_id)  # a write would record: not now
    assert ledger.recorded_target() is None
    with PostgresSink(url_a, table) as right:
        assert RecoveryCoordinator(right, CommitLedger(ck), sink_id=sink_id).run().finished_batches == [0]
    assert _ids(url_a, table) == [0, 1]


def test_the_ledger_compares_what_the_servers_say_before_the_urls(tmp_path) -> None:
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_target("sql 127.0.0.1/db table t", "s1", instance="server X table t")
    ledger.bind_target("sql localhost/db table t", "s1", instance="server X table t")  # an alias
    with pytest.raises(TargetMismatchError):
        ledger.bind_target("sql localhost/db table t", "s1")  # the server cannot tell: the URLs are compared
    with pytest.raises(TargetMismatchError, match=r"\[sql 127.0.0.1/db table t\] \(the server: server X"):
        ledger.bind_target("sql 127.0.0.1/db table t", "s1", instance="server Y table t")  # a moved host
    assert ledger.recorded_target() == "sql 127.0.0.1/db table t"
    assert ledger.recorded_target_instance() == "server X table t"
    older = CommitLedger(str(tmp_path / "ck2"))
    older.bind_target("sql a", "s2")  # a sink (or a server) that cannot tell
    older.bind_target("sql a", "s2", instance="server Z table t")  # the same URL, now told: learnt
    assert (older.recorded_target(), older.recorded_target_instance()) == ("sql a", "server Z table t")


def test_retarget_moves_a_checkpoint_only_when_no_batch_waits(tmp_path) -> None:
    """``twopc recover --retarget``: the operator's move of a checkpoint to another target."""
    out1, out2, ck = tmp_path / "out1", tmp_path / "out2", str(tmp_path / "ck")
    sink = FileSink(str(out1))
    ledger = CommitLedger(ck)
    ledger.bind_sink_id(None, default="job1")
    crash_commit(CommitCoordinator(sink, ledger, "job1"), "after_decision", 0,
                 [run_task(sink, "job1", 0, 0, 0, [1])], tmp_path / "f")
    refused = _cli("recover", "--checkpoint", ck, "--format", "twopc-file", "--option", f"path={out2}", "--retarget")
    assert refused.returncode == 2 and "decided batch(es) [0]" in refused.stderr, refused.stderr
    assert CommitLedger(ck).recorded_target() == f"files {out1}"
    assert _cli("recover", "--checkpoint", ck, "--format", "twopc-file", "--option", f"path={out1}").returncode == 0
    moved = _cli("recover", "--checkpoint", ck, "--format", "twopc-file", "--option", f"path={out2}", "--retarget")
    assert moved.returncode == 0, moved.stderr
    assert CommitLedger(ck).recorded_target() == f"files {out2}"


@pytest.mark.parametrize("server", ["postgres", "mariadb"])
def test_the_servers_say_what_they_are(server, request) -> None:
    """One server under two names is one instance; another table is another target."""
    url = make_url(request.getfixturevalue(f"{server}_url"))
    sink_class = PostgresSink if server == "postgres" else MySqlXaSink
    names = [url.render_as_string(hide_password=False),
             url.set(host="localhost").render_as_string(hide_password=False)]
    instances = []
    for name in names:
        with sink_class(name, "t1") as sink:
            instances.append(sink.target_instance())
            assert str(url.password) not in (sink.target_instance() or "")
    with sink_class(names[0], "t2") as other:
        assert instances[0] is not None and instances[0] == instances[1] != other.target_instance()
