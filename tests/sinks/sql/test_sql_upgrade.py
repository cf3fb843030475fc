"""What a database keeps across an upgrade of the SQL sinks (a reorganisation of their modules): state
the previous version left (prepared transactions, marker rows, staged rows, ledger records
with its handles) is written here by hand, statement by statement as that version wrote it,
never through the sink, and the new code must find, commit, roll back and recover it.

The formats pinned here: the GID / XA gtrid ``twopc:{sink}:{batch}:{partition}:{attempt}:
{8 hex}``, the marker table ``(gid, sink_id, batch_id, partition_id, rows, prepared_at)``, the
staging table's ``twopc_txn`` column and ``twopc_batches``, and the handle envelopes
``twopc.postgres``, ``twopc.mysql_xa`` and ``twopc.staging`` version 1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pymysql
import pytest
import sqlalchemy as sa

from twopc import CommitLedger, CommitOutcome, RecoveryCoordinator, TransactionHandle
from twopc.sinks import MySqlXaHandle, MySqlXaSink, PostgresHandle, PostgresSink, StagingHandle, StagingSink
from twopc.spi.operations import Decision
from twopc.spi.runtime import loads_handle

from tests._sql_helpers import uid as _uid

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])



H = TypeVar("H", bound=TransactionHandle)


def _old_handle(kind: str, cls: type[H], gid: str, **extra: object) -> H:
    """A handle as the previous version's ledger holds it (its JSON envelope, by hand, with
    the kind spelled as it was written: a renamed kind must fail here)."""
    _, sink_id, batch, partition, attempt, _ = gid.split(":")
    payload = {"txn_id": gid, "sink_id": sink_id, "batch_id": int(batch), "partition_id": int(partition),
               "attempt_id": int(attempt), **extra}
    handle = loads_handle(json.dumps({"kind": kind, "version": 1, "payload": payload}))
    assert type(handle) is cls
    return handle


def _decide(tmp_path: Path, sink_id: str, batch: int, *handles: TransactionHandle) -> CommitLedger:
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_sink_id(sink_id, sink_id)
    ledger.record_decision(Decision(sink_id, batch, tuple(handles)))
    return ledger


@pytest.fixture
def pg(postgres_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(postgres_url)
    yield engine
    engine.dispose()


def test_postgres_state_of_the_previous_version_recovers(postgres_url, pg, tmp_path) -> None:
    sink_id, table = f"s_{_uid()}", f"t_{_uid()}"
    with pg.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint, s text)")
    sink = PostgresSink(postgres_url, table)
    sink.validate(SCHEMA)  # creates twopc_markers, as the previous version did (same DDL)
    decided, orphan = f"twopc:{sink_id}:3:0:41:0a1b2c3d", f"twopc:{sink_id}:3:1:42:deadbeef"
    for gid, row in ((decided, 1), (orphan, 2)):  # what its pre_commit sent, statement by statement
        raw = pg.raw_connection()
        try:
            dbapi: Any = raw.driver_connection  # psycopg: the test's own session
            dbapi.autocommit = True
            with dbapi.cursor() as cur:
                cur.execute("BEGIN")
                cur.execute(f"INSERT INTO {table} (id, s) VALUES (%s, 'old')", (row,))
                cur.execute("INSERT INTO twopc_markers (gid, sink_id, batch_id, partition_id, rows) "
                            "VALUES (%s, %s, 3, %s, 1)", (gid, sink_id, row - 1))
                cur.execute(f"PREPARE TRANSACTION '{gid}'")
        finally:
            raw.invalidate()
    assert sorted(h.txn_id for h in sink.list_prepared(sink_id, 3)) == sorted([decided, orphan])
    ledger = _decide(tmp_path, sink_id, 3, _old_handle("twopc.postgres", PostgresHandle, decided, table=table, rows=1))
    report = RecoveryCoordinator(sink, ledger).run()
    assert report.finished_batches == [3] and report.rolled_back == [orphan]
    with pg.connect() as c:
        assert c.exec_driver_sql(f"SELECT id FROM {table}").all() == [(1,)]
    again = _old_handle("twopc.postgres", PostgresHandle, decided, table=table, rows=1)
    assert sink.commit(again) is CommitOutcome.ALREADY_COMMITTED
    assert sink.list_prepared(sink_id) == []
    sink.close()


def test_mysql_xa_state_of_the_previous_version_recovers(mariadb_url, tmp_path) -> None:
    sink_id, table = f"s_{_uid()}", f"t_{_uid()}"
    u = sa.make_url(mariadb_url)
    conn = pymysql.connect(host=u.host, port=u.port or 3306, user=u.username, password=u.password or "",
                           database=u.database, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE {table} (id BIGINT, s TEXT) ENGINE=InnoDB")
        sink = MySqlXaSink(mariadb_url, table)
        sink.validate(SCHEMA)
        gid = f"twopc:{sink_id}:5:0:7:0a1b2c3d"
        writer = pymysql.connect(host=u.host, port=u.port or 3306, user=u.username, password=u.password or "",
                                 database=u.database, autocommit=True)
        with writer.cursor() as cur:  # what its pre_commit sent
            cur.execute("XA START %s", (gid,))
            cur.execute(f"INSERT INTO {table} (id, s) VALUES (1, 'old')")
            cur.execute("INSERT INTO twopc_markers (`gid`, `sink_id`, `batch_id`, `partition_id`, `rows`) "
                        "VALUES (%s, %s, 5, 0, 1)", (gid, sink_id))
            cur.execute("XA END %s", (gid,))
            cur.execute("XA PREPARE %s", (gid,))
        writer.close()  # a prepared xid is committable once its session has ended
        ledger = _decide(tmp_path, sink_id, 5, _old_handle("twopc.mysql_xa", MySqlXaHandle, gid, table=table, rows=1))
        assert RecoveryCoordinator(sink, ledger).run().finished_batches == [5]
        with conn.cursor() as cur:
            cur.execute(f"SELECT id FROM {table}")
            assert cur.fetchall() == ((1,),)
        assert sink.list_prepared(sink_id) == []
        sink.close()
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {table}")
        conn.close()


def test_staged_rows_of_the_previous_version_commit(postgres_url, pg, tmp_path) -> None:
    sink_id, table = f"s_{_uid()}", f"t_{_uid()}"
    with pg.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint, s text)")
    sink = StagingSink(postgres_url, table)
    sink.configure_write(SCHEMA, overwrite=False, streaming=True, checkpointed=True)
    sink.validate(SCHEMA)  # the staging and batch tables: same names, same columns as before
    stage = sink.stage.name
    assert stage.startswith("twopc_stage_")
    chosen, loser = f"twopc:{sink_id}:0:0:11:0a1b2c3d", f"twopc:{sink_id}:0:0:12:deadbeef"
    with pg.begin() as c:  # what its pre_commit committed: rows tagged with the transaction id
        for txn in (chosen, loser):
            c.exec_driver_sql(f"INSERT INTO {stage} (twopc_txn, id, s) VALUES (%(t)s, 1, 'a'), (%(t)s, 2, 'b')",
                              {"t": txn})
    assert sorted(h.txn_id for h in sink.list_prepared(sink_id)) == sorted([chosen, loser])
    handle = _old_handle("twopc.staging", StagingHandle, chosen, table=table, stage_table=stage, rows=2)
    ledger = _decide(tmp_path, sink_id, 0, handle)
    report = RecoveryCoordinator(sink, ledger).run()
    assert report.finished_batches == [0] and report.rolled_back == [loser]
    with pg.connect() as c:
        assert c.exec_driver_sql(f"SELECT id, s FROM {table} ORDER BY id").all() == [(1, "a"), (2, "b")]
        assert c.exec_driver_sql("SELECT rows FROM twopc_batches WHERE sink_id = %(s)s", {"s": sink_id}).all() == [(2,)]
    assert sink.commit_all([handle]) == [CommitOutcome.ALREADY_COMMITTED]
    assert sink.list_prepared(sink_id) == []
