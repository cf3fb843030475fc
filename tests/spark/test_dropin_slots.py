"""``twopc-jdbc`` on PostgreSQL servers with few or no prepared-transaction slots
(``max_prepared_transactions``), the most common configuration (PostgreSQL's default is 0):

- no slots at all: the automatic mode stages, with a checkpoint (batch and streaming) as
  without one; ``commitMode=prepared`` is refused before anything is written;
- fewer free slots than partitions: each task that finds no free slot stages its rows, and
  the driver moves them into the table in one more prepared transaction before the
  decision, so every row lands once; ``commitMode=prepared`` is refused by the tasks that
  find no slot, before they write, and the batch leaves nothing behind;
- another user takes the slots a task reserved, so its ``PREPARE`` fails: the batch ends
  aborted with nothing prepared, and the error says why and what to do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
import sqlalchemy as sa

from twopc import sinks
from twopc.faultinject import LocalPostgres
from twopc.recovery.demos.demo import write_input
from twopc.sinks import StagingSink
from twopc.sinks.sql._engines import dispose_engines

from tests._paths import REPO_ROOT

REPO = REPO_ROOT


@pytest.fixture(scope="module", autouse=True)
def _registered(spark: Any) -> None:
    sinks.register_all(spark)


def _server(slots: int) -> Iterator[tuple[LocalPostgres, sa.Engine]]:
    server = LocalPostgres(max_prepared_transactions=slots)
    server.start()
    engine = sa.create_engine(server.url)
    try:
        yield server, engine
    finally:
        engine.dispose()
        dispose_engines()
        server.stop()


@pytest.fixture(scope="module")
def no_slots() -> Iterator[tuple[LocalPostgres, sa.Engine]]:
    """A PostgreSQL server as installed: ``max_prepared_transactions = 0``."""
    yield from _server(0)


@pytest.fixture(scope="module")
def few_slots() -> Iterator[tuple[LocalPostgres, sa.Engine]]:
    """A PostgreSQL server with 8 prepared-transaction slots, for the Spark writes."""
    yield from _server(8)


@pytest.fixture(scope="module")
def direct_slots() -> Iterator[tuple[LocalPostgres, sa.Engine]]:
    """Another one, for the tests that drive the sink themselves and count its slots: a
    task of a Spark job that failed may still run for a while after the job ended."""
    yield from _server(8)


def _table(engine: sa.Engine) -> str:
    name = f"sl_{uuid.uuid4().hex[:10]}"
    with engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {name} (id bigint NOT NULL, payload text, amount double precision)")
    return name


def _df(spark: Any, lo: int, hi: int, parts: int) -> Any:
    return spark.range(lo, hi, numPartitions=parts).selectExpr("id", "concat('event-', id) AS payload",
                                                               "cast(id AS double) * 0.5 AS amount")


def _writer(df: Any, url: str, table: str) -> Any:
    return df.write.format("twopc-jdbc").mode("append").option("url", url).option("dbtable", table)


def _ids(engine: sa.Engine, table: str) -> list[int]:
    with engine.connect() as c:
        return [r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table} ORDER BY id")]


def _left(engine: sa.Engine, table: str) -> tuple[int, int]:
    """(prepared transactions on the server, rows in *table*'s staging table)."""
    stage = StagingSink(engine.url, table).stage.name
    with engine.connect() as c:
        prepared = c.exec_driver_sql("SELECT count(*) FROM pg_prepared_xacts").scalar_one()
        staged = c.exec_driver_sql(f'SELECT count(*) FROM "{stage}"').scalar_one() \
            if sa.inspect(c).has_table(stage) else 0
    return int(prepared), int(staged)


def _settled(engine: sa.Engine, table: str) -> tuple[int, int]:
    """:func:`_left` once no task of a failed job still holds a slot: Spark does not wait for
    the tasks that run when it aborts a job, and such a task rolls its transaction back when
    it finds its job aborted (the zombie fence). Waits at most a minute."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with engine.connect() as c:
            live = c.exec_driver_sql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
                                     "AND pid IS NOT NULL").scalar_one()
        if live == 0:
            break
        time.sleep(0.2)
    return _left(engine, table)


def _decided_kinds(ck: Path) -> list[str]:
    return sorted(h["kind"] for d in (ck / "twopc" / "decisions").glob("*.json")
                  for h in json.loads(d.read_text())["handles"])


# -- no slots: max_prepared_transactions = 0 -------------------------------------------------

def test_checkpointed_writes_on_a_server_without_prepared_transactions_stage(spark, no_slots, tmp_path) -> None:
    server, engine = no_slots
    table = _table(engine)
    w = _writer(_df(spark, 0, 40, 3), server.url, table).option("checkpointLocation", str(tmp_path / "ck"))
    w.option("txnVersion", "1").save()
    assert _ids(engine, table) == list(range(40))
    assert set(_decided_kinds(tmp_path / "ck")) == {"twopc.staging"}

    ids = write_input(tmp_path / "in", files=2, rows_per_file=10)
    q = (spark.readStream.schema("id long, payload string, amount double").json(str(tmp_path / "in"))
         .selectExpr("id + 1000 AS id", "payload", "amount")
         .writeStream.format("twopc-jdbc").option("url", server.url).option("dbtable", table)
         .option("checkpointLocation", str(tmp_path / "stream-ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    assert _ids(engine, table) == [*range(40), *(i + 1000 for i in ids)]
    assert _left(engine, table) == (0, 0)


def test_commit_mode_prepared_on_a_server_without_slots_is_refused_before_writing(spark, no_slots,
                                                                                  tmp_path) -> None:
    server, engine = no_slots
    table = _table(engine)
    with pytest.raises(Exception, match=r"commitMode=prepared: .*max_prepared_transactions = 0.*restart") as info:
        (_writer(_df(spark, 0, 10, 2), server.url, table).option("commitMode", "prepared")
         .option("checkpointLocation", str(tmp_path / "ck")).option("txnVersion", "1").save())
    assert "commitMode=staging" in str(info.value)
    assert _ids(engine, table) == []


# -- few slots: more partitions than free slots --------------------------------------------

def test_a_checkpointed_write_with_more_partitions_than_slots_lands_once(spark, few_slots, tmp_path) -> None:
    server, engine = few_slots
    table = _table(engine)
    ck = tmp_path / "ck"
    _writer(_df(spark, 0, 240, 24), server.url, table).option("checkpointLocation", str(ck)) \
        .option("txnVersion", "1").save()
    assert _ids(engine, table) == list(range(240))
    kinds = _decided_kinds(ck)
    assert set(kinds) == {"twopc.postgres"} and 1 < len(kinds) <= 8  # some tasks prepared, one moved the rest
    assert _left(engine, table) == (0, 0)


def test_the_plain_drop_in_with_more_partitions_than_slots_lands_once_and_says_how(few_slots, tmp_path) -> None:
    server, engine = few_slots
    table = _table(engine)
    env = {**os.environ, "TWOPC_DROPIN_URL": server.url, "PYTHONPATH": str(REPO), "TWOPC_LOG_LEVEL": "INFO"}
    job = subprocess.run([sys.executable, "-m", "tests._dropin_job", table, "0", "16"], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=600, check=False)
    console = job.stderr
    assert job.returncode == 0, console[-4000:]
    assert _ids(engine, table) == list(range(30))
    assert _left(engine, table) == (0, 0)
    assert "INFO twopc.sinks.jdbc: twopc-jdbc: prepared commit mode" in console, console[-4000:]
    assert "max_prepared_transactions = 8" in console
    moved = [line for line in console.splitlines() if "INFO twopc.sinks.jdbc" in line
             and "staged their rows (no free prepared-transaction slot); moved them" in line]
    assert moved, console[-4000:]
    assert server.password not in console


def test_commit_mode_prepared_with_more_partitions_than_slots_fails_cleanly(spark, few_slots, tmp_path) -> None:
    server, engine = few_slots
    table = _table(engine)
    # 9 partitions: the ninth finds the 8 slots taken and fails (each of its attempts), while no
    # other task runs any more (a task still running when the job aborts may end after it)
    with pytest.raises(Exception, match=r"no free prepared-transaction slot") as info:
        _writer(_df(spark, 0, 90, 9), server.url, table).option("commitMode", "prepared").save()
    text = str(info.value)
    assert "max_prepared_transactions" in text and "commitMode=staging" in text and "coalesce" in text
    assert _settled(engine, table) == (0, 0)
    assert _ids(engine, table) == []


# -- the same, through the sink and the coordinator (no Spark) ----------------------------------

def _sink(server: LocalPostgres, table: str, **options: str) -> Any:
    from twopc.sinks import JdbcSink

    sink = JdbcSink.from_options({"url": server.url, "dbtable": table, **options})
    sink.configure_write(SCHEMA, overwrite=False, streaming=False, checkpointed=True)
    sink.validate(SCHEMA)
    return sink


def _attempt(sink: Any, sink_id: str, partition: int, ids: list[int]) -> Any:
    from twopc import TransactionContext

    txn = sink.begin_transaction(TransactionContext(sink_id, 0, partition, 100 + partition))
    sink.invoke_batch(txn, _batch(ids))
    return sink.pre_commit(txn)


def _mine(engine: sa.Engine, sink_id: str) -> int:
    with engine.connect() as c:
        return int(c.exec_driver_sql("SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE %s",
                                     (f"twopc:{sink_id}:%",)).scalar_one())


def test_staged_partitions_are_checked_before_the_decision_and_committed_with_it(direct_slots, tmp_path) -> None:
    """Eight slots: seven tasks prepare (slot 0 is the driver's), the rest stage; the
    driver moves the staged rows into one prepared transaction before it decides. A staged
    row that breaks a key fails the batch before the decision, with nothing left."""
    from twopc import CommitCoordinator, CommitLedger, SinkError

    server, engine = direct_slots
    table = _table(engine)
    with engine.begin() as c:
        c.exec_driver_sql(f"ALTER TABLE {table} ADD PRIMARY KEY (id)")
        c.exec_driver_sql(f"INSERT INTO {table} VALUES (-1, 'old', 0)")
    sink = _sink(server, table)
    try:
        assert sink.may_stage
        for round_, dup in enumerate((True, False)):
            sid = f"few{round_}"
            handles = [_attempt(sink, sid, p, [p * 10, p * 10 + 1]) for p in range(10)]
            kinds = [type(h).__name__ for h in handles]
            assert kinds == ["PostgresHandle"] * 7 + ["StagingHandle"] * 3, kinds
            if dup:  # one more staged attempt holds the table's key -1
                handles.append(_attempt(sink, sid, 10, [-1]))
            ledger = CommitLedger(str(tmp_path / sid))
            coordinator = CommitCoordinator(sink, ledger, sid)
            if dup:
                with pytest.raises(SinkError, match=rf"{table}_pkey"):
                    coordinator.commit_batch(0, handles)
                assert ledger.decision(0) is None  # refused before the decision
                coordinator.abort_batch(0, handles)
                assert _ids(engine, table) == [-1]
            else:
                result = coordinator.commit_batch(0, handles)
                assert result.action == "committed" and result.committed == 8  # 7 tasks + 1 move
                assert result.aborted == 0  # the staged attempts were moved, not rolled back
                decision = ledger.decision(0)
                assert decision is not None and {type(h).__name__ for h in decision.handles} == {"PostgresHandle"}
                assert _ids(engine, table) == [-1, *sorted(i for p in range(10) for i in (p * 10, p * 10 + 1))]
            assert _mine(engine, sid) == 0 and _left(engine, table) == (0, 0)
    finally:
        sink.close()


@pytest.mark.parametrize("decided", [False, True])
def test_a_driver_that_dies_after_moving_staged_rows_is_recovered(direct_slots, tmp_path, decided: bool) -> None:
    """The driver moved the staged rows into a prepared transaction and died before its
    decision (recovery rolls every part back: nothing lands) or right after it (recovery
    commits every part and deletes the staged leftovers: every row lands once)."""
    from twopc import CommitLedger, RecoveryCoordinator
    from twopc.spi.operations import Decision

    server, engine = direct_slots
    table = _table(engine)
    sink = _sink(server, table)
    sid = f"dead{int(decided)}"
    try:
        handles = [_attempt(sink, sid, p, [p]) for p in range(9)]
        named = sink.before_decision(0, handles)
        assert len(named) == 8 and _mine(engine, sid) == 8  # 7 tasks and the move
        ledger = CommitLedger(str(tmp_path / "ck"))
        if decided:
            ledger.record_decision(Decision(sid, 0, tuple(named)))
    finally:
        sink.close()
    survivor = _sink(server, table)  # a new driver process
    try:
        report = RecoveryCoordinator(survivor, CommitLedger(str(tmp_path / "ck")), sink_id=sid).run()
    finally:
        survivor.close()
    assert _ids(engine, table) == (list(range(9)) if decided else [])
    assert report.committed == (8 if decided else 0)
    assert _mine(engine, sid) == 0 and _left(engine, table) == (0, 0)


def test_a_batch_whose_every_task_found_no_slot_commits_as_a_staging_batch(direct_slots, tmp_path) -> None:
    """Other users hold all but one slot (the driver's): every task stages, and the batch
    commits as the staging mode commits one, in one local transaction."""
    from twopc import CommitCoordinator, CommitLedger

    server, engine = direct_slots
    table = _table(engine)
    sink = _sink(server, table)
    others: list[psycopg.Connection[Any]] = []
    try:
        for i in range(7):
            o = psycopg.connect(server.dsn)
            o.execute("SELECT 1")
            o.execute(f"PREPARE TRANSACTION 'busy-{i}'")
            o.commit()
            others.append(o)
        handles = [_attempt(sink, "all", p, [p]) for p in range(3)]
        assert {type(h).__name__ for h in handles} == {"StagingHandle"}
        result = CommitCoordinator(sink, CommitLedger(str(tmp_path / "ck")), "all").commit_batch(0, handles)
        assert result.committed == 3
    finally:
        with psycopg.connect(server.dsn, autocommit=True) as c:
            for i in range(len(others)):
                c.execute(f"ROLLBACK PREPARED 'busy-{i}'")
        for o in others:
            o.close()
        sink.close()
    assert _ids(engine, table) == [0, 1, 2]
    assert _left(engine, table) == (0, 0)


def test_a_composite_participant_does_not_stage(direct_slots) -> None:
    """A composite decides its participants' handles itself (no before_decision): a
    twopc-jdbc participant's task that finds no slot fails before it writes."""
    from twopc.sinks import JdbcSink
    from twopc.spi import TargetConfigurationError

    server, engine = direct_slots
    table = _table(engine)
    sink = JdbcSink.from_options({"url": server.url, "dbtable": table})
    sink.configure_write(SCHEMA, overwrite=False, streaming=False, checkpointed=True)
    assert sink.commit_may_be_refused() is None  # what a composite asks of each participant
    sink.validate(SCHEMA)
    assert not sink.may_stage
    try:
        handles = [_attempt(sink, "part", p, [p]) for p in range(8)]
        with pytest.raises(TargetConfigurationError, match="no free prepared-transaction slot"):
            _attempt(sink, "part", 8, [8])
        for h in handles:
            sink.abort(h)
    finally:
        sink.close()
    assert _mine(engine, "part") == 0 and _left(engine, table) == (0, 0)


def test_a_slot_taken_by_another_user_before_prepare_ends_the_batch_cleanly(direct_slots, tmp_path) -> None:
    """The race: tasks claimed slots, another user prepares transactions of its own until
    the server is full, and a task's ``PREPARE`` fails. The batch ends aborted with nothing
    prepared, and the error names the setting and the ways out."""
    from twopc import CommitCoordinator, CommitLedger, SinkError, TransactionContext

    server, engine = direct_slots
    table = _table(engine)
    sink = _sink(server, table)
    others: list[psycopg.Connection[Any]] = []
    try:
        first = _attempt(sink, "race", 0, [1, 2])
        txn = sink.begin_transaction(TransactionContext("race", 0, 1, 101))
        sink.invoke_batch(txn, _batch([3, 4]))
        with psycopg.connect(server.dsn, autocommit=True) as c:
            used = int(c.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0])  # type: ignore[index]  # one row
        for i in range(8 - used):
            o = psycopg.connect(server.dsn)
            o.execute("SELECT 1")
            o.execute(f"PREPARE TRANSACTION 'other-{i}'")
            o.commit()
            others.append(o)
        with pytest.raises(SinkError, match=r"53200 .*max_prepared_transactions.*commitMode=staging") as info:
            sink.pre_commit(txn)
        assert "nothing of this attempt was written" in str(info.value)
        CommitCoordinator(sink, CommitLedger(str(tmp_path / "ck")), "race").abort_batch(0, [first, None])
        assert _mine(engine, "race") == 0
    finally:
        with psycopg.connect(server.dsn, autocommit=True) as c:
            for i in range(len(others)):
                c.execute(f"ROLLBACK PREPARED 'other-{i}'")
        for o in others:
            o.close()
        sink.close()
    assert _ids(engine, table) == []
    assert _left(engine, table) == (0, 0)


SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string()), ("amount", pa.float64())])


def _batch(ids: list[int]) -> pa.RecordBatch:
    return pa.record_batch([pa.array(ids, pa.int64()), pa.array([f"event-{i}" for i in ids]),
                            pa.array([i * 0.5 for i in ids])], schema=SCHEMA)
