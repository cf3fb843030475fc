"""How the staging mode's commit clears the rows it moved, on a real PostgreSQL: by
``TRUNCATE`` when nothing else is staged (no dead rows left for vacuum), by ``DELETE`` when
another attempt's rows are staged or another session is staging, and never losing the rows
of a write that stages while the commit runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest
import sqlalchemy as sa
from sqlalchemy import event

import twopc.sinks.sql._staging_committer as staging_commit
from twopc import TransactionContext
from twopc.sinks import StagingHandle, StagingSink

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
_COUNTER = iter(range(10**6))
SMALL = 99  # rows of a batch small enough to be deleted (see the fixture)


def _batch(start: int, n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"id": list(range(start, start + n)),
                                       "name": [f"n{i}" for i in range(start, start + n)]}, schema=SCHEMA)


@pytest.fixture
def target(postgres_url: str, request: pytest.FixtureRequest,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[StagingSink, sa.Engine, str]]:
    monkeypatch.setattr(staging_commit, "TRUNCATE_FROM_ROWS", SMALL + 1)  # batches of 100+ rows truncate here
    engine = sa.create_engine(postgres_url)
    table = f"stg_clear_{next(_COUNTER)}"
    with engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id BIGINT NOT NULL, name TEXT)")
    isolation = getattr(request, "param", "READ_COMMITTED")
    sink = StagingSink(postgres_url, table, lock_timeout="20s", isolation_level=isolation)
    sink.validate(SCHEMA)
    yield sink, engine, table
    sink.close()
    with engine.begin() as c:
        c.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        c.exec_driver_sql(f"DROP TABLE IF EXISTS {sink.stage.quoted(c.dialect)}")
    engine.dispose()


def _sink_id(sink: StagingSink) -> str:
    """One sink id per test (the batch marker table is shared)."""
    return sink.table.name.replace("_", "")


def _stage(sink: StagingSink, batch_id: int, start: int, n: int = 100) -> StagingHandle:
    txn = sink.begin_transaction(TransactionContext(_sink_id(sink), batch_id, 0, batch_id, 0))
    sink.invoke_batch(txn, _batch(start, n))
    return sink.pre_commit(txn)


def _ids(engine: sa.Engine, table: str) -> list[int]:
    with engine.connect() as c:
        return [r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table} ORDER BY id")]


def _stage_bytes(engine: sa.Engine, sink: StagingSink) -> int:
    with engine.connect() as c:
        return int(c.execute(sa.text("SELECT pg_relation_size(CAST(:t AS regclass))"),
                             {"t": sink.stage.quoted(c.dialect)}).scalar_one())


def _waiting_for_a_lock(conn: sa.Connection) -> bool:
    """Whether a session of this database waits for a lock (pg_stat_activity is read
    afresh: within one transaction it would repeat its first answer)."""
    try:
        return bool(conn.exec_driver_sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                         "AND datname = current_database()").scalar_one())
    finally:
        conn.rollback()


def _commit_with_hook(sink: StagingSink, handles: list[StagingHandle], prefix: str,
                      hook: Callable[[], None]) -> None:
    """``commit_all(handles)``, running *hook* once just before the commit sends the first
    statement starting with *prefix*."""
    fired: list[bool] = []

    def before(_conn: sa.Connection, _cur: object, stmt: str, *_args: object) -> None:
        if stmt.startswith(prefix) and not fired:
            fired.append(True)
            hook()

    engine = sink._engine()
    event.listen(engine, "before_cursor_execute", before)
    try:
        sink.commit_all(handles)
    finally:
        event.remove(engine, "before_cursor_execute", before)


def test_a_commit_with_nothing_else_staged_leaves_no_dead_rows(target) -> None:
    """The commit empties the staging table's file (TRUNCATE): no dead rows for a vacuum,
    none for the next write's scans to read."""
    sink, engine, table = target
    sink.commit_all([_stage(sink, 1, 0, 500)])
    assert _ids(engine, table) == list(range(500))
    assert _stage_bytes(engine, sink) == 0


def test_a_small_batch_is_deleted_not_truncated(target) -> None:
    """Below TRUNCATE_FROM_ROWS the commit deletes its rows: TRUNCATE's fixed cost (a new
    file, catalog updates) is more than a small DELETE's (a micro-batch's commit was ~5 ms
    slower); the dead rows stay for the vacuum, and a later large batch clears the file."""
    sink, engine, table = target
    sink.commit_all([_stage(sink, 1, 0, SMALL)])
    assert _ids(engine, table) == list(range(SMALL))
    assert _stage_bytes(engine, sink) > 0
    sink.commit_all([_stage(sink, 2, SMALL, 500)])
    assert _stage_bytes(engine, sink) == 0


def test_rows_staged_by_another_batch_survive_the_commit(target) -> None:
    """Another batch's committed staged rows are kept (the commit deletes only its own),
    and that batch later commits in full."""
    sink, engine, table = target
    later = _stage(sink, 2, 100)
    sink.commit_all([_stage(sink, 1, 0)])
    assert _ids(engine, table) == list(range(100))
    sink.commit_all([later])
    assert _ids(engine, table) == list(range(200))


def test_a_task_still_staging_loses_nothing(target) -> None:
    """A task staging while the commit runs (its transaction open) keeps its rows: the
    commit does not wait for it, deletes only its own rows, and the task's batch later
    commits in full."""
    sink, engine, table = target
    open_txn = sink.begin_transaction(TransactionContext(_sink_id(sink), 3, 0, 3, 0))
    try:
        sink.invoke_batch(open_txn, _batch(200, 100))
        sink.commit_all([_stage(sink, 1, 0)])
        assert _ids(engine, table) == list(range(100))
        last = sink.pre_commit(open_txn)
    finally:
        sink.rollback(open_txn)  # a no-op once it is staged
    sink.commit_all([last])
    assert _ids(engine, table) == [*range(100), *range(200, 300)]
    assert _stage_bytes(engine, sink) == 0  # the last commit found nothing else staged


def test_a_task_staging_while_the_commit_truncates_keeps_its_rows(target) -> None:
    """A task that starts staging after the commit checked that nothing else is staged
    waits for the commit (its table lock) and stages into the emptied table; its rows are
    not truncated away. The task runs at the moment the commit is about to TRUNCATE."""
    sink, engine, table = target
    done: list[StagingHandle] = []
    errors: list[BaseException] = []

    def stage_batch_2() -> None:
        try:
            done.append(_stage(sink, 2, 100))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    def before_truncate() -> None:
        worker = threading.Thread(target=stage_batch_2)
        worker.start()
        with engine.connect() as watch:  # until the task staged, or waits for the commit's lock
            while worker.is_alive() and not _waiting_for_a_lock(watch):
                time.sleep(0.01)
        threads.append(worker)

    threads: list[threading.Thread] = []
    _commit_with_hook(sink, [_stage(sink, 1, 0)], "TRUNCATE", before_truncate)
    assert len(threads) == 1, "the commit did not truncate the staging table"
    threads[0].join(30)
    assert not errors, errors
    sink.commit_all(done)
    assert _ids(engine, table) == list(range(200))


@pytest.mark.parametrize("target", ["READ_COMMITTED", "REPEATABLE_READ", "SERIALIZABLE"], indirect=True)
def test_rows_staged_while_the_commit_moves_survive_it(target) -> None:
    """Rows another task stages and commits while the commit moves its own (after the
    commit's transaction began, so a REPEATABLE READ or SERIALIZABLE snapshot does not see
    them) are kept, and their batch later commits in full, at every isolation level."""
    sink, engine, table = target
    staged: list[StagingHandle] = []

    def before_move() -> None:  # another connection: nothing it needs is locked
        staged.append(_stage(sink, 2, 100))

    _commit_with_hook(sink, [_stage(sink, 1, 0)], f'INSERT INTO "{table}" ', before_move)
    assert len(staged) == 1, "the move statement was not seen"
    assert _ids(engine, table) == list(range(100))
    sink.commit_all(staged)
    assert _ids(engine, table) == list(range(200))
