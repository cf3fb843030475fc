"""MySqlXaSink against a real MariaDB (the ``mariadb_url`` fixture; no mocks): what only
this sink does (XA ids and marker rows, xids attached to live sessions, crashes of the
writing process, validation, data errors, quoting and credentials). The protocol contract
every sink shares (commit idempotent, lost after rollback, abort refused after commit,
list_prepared, envelope, pickling, coordinator and recovery) runs through the conformance
kit in test_kit_sinks.py."""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pymysql
import pytest
import sqlalchemy as sa

from twopc import CommitOutcome, ConfigurationError, SinkError
from twopc._sink import purge_markers_best_effort
from twopc.sinks import MySqlXaHandle, MySqlXaSink
from twopc.sinks.mysql import _prepared as _mysql_xa
from twopc.sinks.sql import dispose_engines
from twopc.spi import (
    MissingOptionError,
    ProtocolError,
    SchemaMismatchError,
    SinkUnavailableError,
    TargetConfigurationError,
)
from twopc.spi.runtime import dumps_handle, loads_handle

from tests._paths import REPO_ROOT
from tests._sql_helpers import batch as _batch
from tests._sql_helpers import chain as _chain
from tests._sql_helpers import ctx as _ctx
from tests._sql_helpers import password as _password
from tests._sql_helpers import prepare as _prepare
from tests._sql_helpers import uid as _uid
from tests._sql_helpers import validated

ROOT = REPO_ROOT


# -- helpers ----------------------------------------------------------------------------


def _connect(url: str, **kw: Any) -> pymysql.connections.Connection[Any]:
    u = sa.make_url(url)
    return pymysql.connect(host=u.host, port=u.port or 3306, user=u.username, password=u.password or "",
                           database=u.database, autocommit=True, charset="utf8mb4", **kw)


def _sql(url: str, query: str, params: tuple[Any, ...] | None = None) -> list[tuple[Any, ...]]:
    """Run one statement on a fresh connection (UTC session) and return its rows."""
    conn = _connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00', lock_wait_timeout = 10")
            cur.execute(query, params)
            return [tuple(r) for r in cur.fetchall()]
    finally:
        conn.close()


def _recovered(url: str, sink_id: str) -> list[str]:
    """gtrids of the sink's prepared XA transactions, straight from XA RECOVER."""
    out = []
    for fmt, glen, _blen, data in _sql(url, "XA RECOVER"):
        gid = bytes(data[:glen]).decode("ascii", "replace")
        if fmt == 1 and gid.startswith(f"twopc:{sink_id}:"):
            out.append(gid)
    return sorted(out)


def _roll_back_leftovers(url: str, sink_id: str) -> None:
    for gid in _recovered(url, sink_id):
        # (an OperationalError: still attached to a live session of a failed test, which ends it)
        with contextlib.suppress(pymysql.err.OperationalError):
            _sql(url, "XA ROLLBACK %s", (gid,))


@pytest.fixture(autouse=True)
def _release_connections() -> Iterator[None]:
    """Give back the pooled connections of the sinks a test dropped while the server is up
    (a pool finalizer that meets a stopped server logs a traceback from inside the garbage
    collector, which can hit CPython 3.11.7's ast.parse reentrancy bug)."""
    yield
    gc.collect()
    dispose_engines()


@pytest.fixture
def sink_id(mariadb_url: str) -> Iterator[str]:
    """A fresh sink id; prepared XA transactions a failed test left behind are rolled back."""
    sid = f"s_{_uid()}"
    yield sid
    _roll_back_leftovers(mariadb_url, sid)


@pytest.fixture
def table(mariadb_url: str, sink_id: str) -> Iterator[str]:
    """A fresh InnoDB table ``t_<uid> (id bigint primary key, s text, x double, ts datetime(6))``."""
    name = f"t_{_uid()}"
    _sql(mariadb_url, f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, s TEXT, x DOUBLE, ts DATETIME(6) NULL) "
                      f"ENGINE=InnoDB")
    yield name
    _roll_back_leftovers(mariadb_url, sink_id)
    _sql(mariadb_url, f"DROP TABLE IF EXISTS {name}")


def _count(url: str, table: str) -> int:
    return int(_sql(url, f"SELECT COUNT(*) FROM {table}")[0][0])


# -- the protocol -------------------------------------------------------------------------

def test_arrow_and_dict_rows_round_trip_with_nulls_timestamps_and_a_marker(mariadb_url, table, sink_id):
    sink = _validated(mariadb_url, table, pa.schema([("id", pa.int64()), ("s", pa.string()), ("x", pa.float64()),
                                                     ("ts", pa.timestamp("us", "UTC"))]))
    paris = dt.timezone(dt.timedelta(hours=1))
    arrow = pa.record_batch({
        "id": pa.array([1, 2, 3], pa.int64()),
        "s": pa.array(["héllo 👋", None, ""], pa.string()),
        "x": pa.array([0.5, None, -1e300], pa.float64()),
        "ts": pa.array([dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC), None,
                        dt.datetime(2024, 1, 1, 1, 0, tzinfo=paris)], pa.timestamp("us", "UTC")),
    })
    naive = pa.record_batch({"id": pa.array([4], pa.int64()),
                             "ts": pa.array([dt.datetime(2023, 12, 31, 23, 59, 59)], pa.timestamp("ns"))})
    txn = sink.begin_transaction(_ctx(sink_id, batch=7, partition=3, attempt=42))
    sink.invoke_batch(txn, arrow)
    sink.invoke_batch(txn, naive)
    sink.invoke(txn, {"id": 5, "s": "dict", "x": 2.25, "ts": dt.datetime(2020, 2, 29, 12, tzinfo=paris)})
    sink.invoke(txn, {"ID": 6, "s": None})  # column names are case-insensitive in MySQL
    h = sink.pre_commit(txn)
    assert h.txn_id.startswith(f"twopc:{sink_id}:7:3:42:") and len(h.txn_id.encode()) <= 64
    assert (h.sink_id, h.batch_id, h.partition_id, h.attempt_id, h.rows, h.table) == (sink_id, 7, 3, 42, 6, table)
    assert _count(mariadb_url, table) == 0  # prepared: invisible
    assert _recovered(mariadb_url, sink_id) == [h.txn_id]
    assert sink.commit(h) is CommitOutcome.COMMITTED
    assert _sql(mariadb_url, f"SELECT id, s, x, ts FROM {table} ORDER BY id") == [
        (1, "héllo 👋", 0.5, dt.datetime(2024, 5, 6, 7, 8, 9, 123456)),
        (2, None, None, None),
        (3, "", -1e300, dt.datetime(2024, 1, 1, 0, 0)),  # +01:00 written as naive UTC
        (4, None, None, dt.datetime(2023, 12, 31, 23, 59, 59)),
        (5, "dict", 2.25, dt.datetime(2020, 2, 29, 11, 0)),
        (6, None, None, None),
    ]
    assert _sql(mariadb_url, "SELECT sink_id, batch_id, partition_id, `rows` FROM twopc_markers WHERE gid = %s",
                (h.txn_id,)) == [(sink_id, 7, 3, 6)]
    assert _recovered(mariadb_url, sink_id) == []
    sink.close()


def test_more_rows_than_batch_size_are_inserted_in_chunks(mariadb_url, table, sink_id):
    sink = _validated(mariadb_url, table, batch_size=7)
    ids = list(range(100))
    txn = sink.begin_transaction(_ctx(sink_id))
    sink.invoke_batch(txn, _batch(ids[:60]))
    for i in ids[60:]:
        sink.invoke(txn, {"id": i, "s": f"v{i}", "x": i / 2})
    h = sink.pre_commit(txn)
    assert h.rows == 100
    assert sink.commit(h) is CommitOutcome.COMMITTED
    assert _sql(mariadb_url, f"SELECT COUNT(*), SUM(id), MIN(s), MAX(x) FROM {table}") == [
        (100, sum(ids), "v0", 49.5)]


def test_prepared_xid_survives_disconnect_and_is_committed_from_another_connection(mariadb_url, table, sink_id):
    """The server facts the sink relies on, then the sink itself after pool disposal."""
    # 1. raw XA: prepare, close the connection, commit from another one
    gid = f"twopc:{sink_id}:0:0:0:{uuid.uuid4().hex[:8]}"
    a = _connect(mariadb_url)
    with a.cursor() as cur:
        cur.execute("XA START %s", (gid,))
        cur.execute(f"INSERT INTO {table} (id) VALUES (100)")
        cur.execute("XA END %s", (gid,))
        cur.execute("XA PREPARE %s", (gid,))
    # while the preparing session lives, the xid is attached to it: nobody else may commit it
    with pytest.raises(pymysql.err.OperationalError) as info:
        _sql(mariadb_url, "XA COMMIT %s", (gid,))
    assert info.value.args[0] == 1397  # XAER_NOTA
    assert _recovered(mariadb_url, sink_id) == [gid]
    a.close()
    assert _recovered(mariadb_url, sink_id) == [gid]
    _sql(mariadb_url, "XA COMMIT %s", (gid,))
    assert _sql(mariadb_url, f"SELECT id FROM {table}") == [(100,)]
    # 2. the sink: prepare, forget every connection of this process, commit from a new sink
    sink = _validated(mariadb_url, table)
    h = _prepare(sink, _ctx(sink_id), _batch([1, 2, 3]))
    envelope = dumps_handle(h)
    sink.close()
    del sink
    dispose_engines()
    assert _recovered(mariadb_url, sink_id) == [h.txn_id]
    fresh = MySqlXaSink(mariadb_url, table)
    handle = loads_handle(envelope)
    assert isinstance(handle, MySqlXaHandle) and handle == h
    assert fresh.commit(handle) is CommitOutcome.COMMITTED
    assert _count(mariadb_url, table) == 4


def test_commit_waits_for_an_xid_attached_to_a_live_session(mariadb_url, table, sink_id, monkeypatch):
    sink = _validated(mariadb_url, table)
    gid = f"twopc:{sink_id}:1:0:1:{uuid.uuid4().hex[:8]}"
    a = _connect(mariadb_url)
    with a.cursor() as cur:
        cur.execute("XA START %s", (gid,))
        cur.execute(f"INSERT INTO {table} (id) VALUES (1)")
        cur.execute("INSERT INTO twopc_markers (gid, sink_id, batch_id, partition_id, `rows`) "
                    "VALUES (%s, %s, 1, 0, 1)", (gid, sink_id))
        cur.execute("XA END %s", (gid,))
        cur.execute("XA PREPARE %s", (gid,))
    (h,) = sink.list_prepared(sink_id)
    assert h.txn_id == gid
    monkeypatch.setattr(_mysql_xa, "_DETACH_WAIT_S", 0.3)
    with pytest.raises(SinkError, match="attached to a live session"):
        sink.commit(h)  # not LOST, not ALREADY_COMMITTED: the xid is still there
    with pytest.raises(SinkError, match="attached to a live session"):
        sink.abort(h)
    a.close()
    monkeypatch.setattr(_mysql_xa, "_DETACH_WAIT_S", 10.0)
    assert sink.commit(h) is CommitOutcome.COMMITTED
    assert _count(mariadb_url, table) == 1


_WRITER = textwrap.dedent("""
    import os, sys, time
    import pyarrow as pa
    from twopc.sinks import MySqlXaSink
    from twopc import TransactionContext
    from twopc.spi.runtime import dumps_handle

    sink = MySqlXaSink(os.environ["URL"], os.environ["TABLE"])
    txn = sink.begin_transaction(TransactionContext(os.environ["SINK"], 3, 0, 9))
    sink.invoke_batch(txn, pa.record_batch({"id": pa.array([1, 2], pa.int64()), "s": ["a", "b"]}))
    if os.environ["STAGE"] == "prepared":
        print(dumps_handle(sink.pre_commit(txn)), flush=True)
    else:
        print("invoked", flush=True)
    time.sleep(600)
""")


def _killed_writer(url: str, table: str, sink_id: str, stage: str) -> str:
    """Run a writer process to *stage*, SIGKILL it, return the line it printed."""
    env = {**os.environ, "URL": url, "TABLE": table, "SINK": sink_id, "STAGE": stage,
           "PYTHONPATH": str(ROOT)}
    with subprocess.Popen([sys.executable, "-c", _WRITER], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=env, cwd=str(ROOT), text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            line = proc.stdout.readline().strip()
            if not line:
                proc.wait(timeout=60)
                pytest.fail(f"the writer process printed nothing: {proc.stderr.read()[-3000:]}")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return line


def test_prepared_xid_survives_a_kill_of_the_writing_process(mariadb_url, table, sink_id):
    sink = _validated(mariadb_url, table)
    envelope = _killed_writer(mariadb_url, table, sink_id, "prepared")
    shipped = loads_handle(envelope)
    (found,) = sink.list_prepared(sink_id)  # recovery finds it without the handle
    assert found.txn_id == shipped.txn_id and (found.batch_id, found.partition_id, found.attempt_id) == (3, 0, 9)
    assert _count(mariadb_url, table) == 0
    assert sink.commit(found) is CommitOutcome.COMMITTED
    assert sink.commit(shipped) is CommitOutcome.ALREADY_COMMITTED  # type: ignore[arg-type]  # a MySqlXaHandle, typed as its base
    assert _sql(mariadb_url, f"SELECT id, s FROM {table} ORDER BY id") == [(1, "a"), (2, "b")]


def test_a_writer_killed_before_prepare_leaves_nothing_and_no_locks(mariadb_url, table, sink_id):
    sink = _validated(mariadb_url, table, lock_timeout=5)
    _killed_writer(mariadb_url, table, sink_id, "invoked")
    # the server rolls the open XA transaction back when the session dies; the same keys are free
    h = _prepare(sink, _ctx(sink_id, batch=3, attempt=10), _batch([1, 2]))
    assert [p.txn_id for p in sink.list_prepared(sink_id)] == [h.txn_id]
    assert sink.commit(h) is CommitOutcome.COMMITTED
    assert _sql(mariadb_url, f"SELECT id, s FROM {table} ORDER BY id") == [(1, "v1"), (2, "v2")]


def test_a_rolled_back_transaction_refuses_more_rows(mariadb_url, table, sink_id):
    """(That rollback leaves nothing is the conformance kit's: test_kit_sinks.py.)"""
    sink = _validated(mariadb_url, table)
    txn = sink.begin_transaction(_ctx(sink_id))
    sink.invoke_batch(txn, _batch([1, 2]))
    sink.rollback(txn)
    with pytest.raises(SinkError, match="rolled back"):
        sink.invoke_batch(txn, _batch([3]))
    assert _count(mariadb_url, table) == 0 and _recovered(mariadb_url, sink_id) == []


def test_rollback_never_raises_when_the_connection_died(mariadb_url, table, sink_id):
    sink = _validated(mariadb_url, table)
    txn = sink.begin_transaction(_ctx(sink_id))
    sink.invoke_batch(txn, _batch([1]))
    _sql(mariadb_url, f"KILL CONNECTION {txn.session_id}")
    sink.rollback(txn)
    sink.close()
    assert _count(mariadb_url, table) == 0 and _recovered(mariadb_url, sink_id) == []


def test_a_write_session_killed_before_prepare_is_unavailable_and_leaves_nothing(mariadb_url, table, sink_id):
    sink = _validated(mariadb_url, table)
    txn = sink.begin_transaction(_ctx(sink_id))
    sink.invoke_batch(txn, _batch([1, 2]))
    _sql(mariadb_url, f"KILL CONNECTION {txn.session_id}")  # e.g. the server restarted, a DBA
    with pytest.raises(SinkUnavailableError, match="lost the connection") as info:
        sink.pre_commit(txn)
    assert _password(mariadb_url) not in str(info.value)
    sink.rollback(txn)  # nothing to do, never raises
    assert _count(mariadb_url, table) == 0 and _recovered(mariadb_url, sink_id) == []
    assert sink.commit(_prepare(sink, _ctx(sink_id, attempt=2), _batch([1, 2]))) is CommitOutcome.COMMITTED


def test_commit_survives_a_dead_control_connection(mariadb_url, table, sink_id):
    sink = _validated(mariadb_url, table)
    h = _prepare(sink, _ctx(sink_id), _batch([1]))
    sink.list_prepared(sink_id)  # opens the control connection
    control_id = sink.target._control.driver_connection.thread_id()  # type: ignore[union-attr]  # list_prepared opened it
    _sql(mariadb_url, f"KILL CONNECTION {control_id}")
    assert sink.commit(h) is CommitOutcome.COMMITTED  # replaced and retried once
    assert sink.commit(h) is CommitOutcome.ALREADY_COMMITTED


def test_close_rolls_back_open_transactions_but_not_prepared_ones(mariadb_url, table, sink_id):
    sink = _validated(mariadb_url, table)
    h = _prepare(sink, _ctx(sink_id, partition=0), _batch([1]))
    open_txn = sink.begin_transaction(_ctx(sink_id, partition=1))
    sink.invoke_batch(open_txn, _batch([2]))
    sink.close()
    assert _recovered(mariadb_url, sink_id) == [h.txn_id]
    assert sink.commit(h) is CommitOutcome.COMMITTED  # usable after close
    assert _sql(mariadb_url, f"SELECT id FROM {table}") == [(1,)]


def test_purge_markers_deletes_only_older_batches_of_the_sink(mariadb_url, table, sink_id):
    sink = _validated(mariadb_url, table)
    for b in (1, 2, 3):
        assert sink.commit(_prepare(sink, _ctx(sink_id, batch=b), _batch([b]))) is CommitOutcome.COMMITTED
    assert sink.purge_markers(sink_id, below_batch=3) == 2
    assert _sql(mariadb_url, "SELECT batch_id FROM twopc_markers WHERE sink_id = %s", (sink_id,)) == [(3,)]
    purge_markers_best_effort(sink, sink_id, below_batch=4)  # the runtime's call
    assert _sql(mariadb_url, "SELECT COUNT(*) FROM twopc_markers WHERE sink_id = %s", (sink_id,)) == [(0,)]
    purge_markers_best_effort(MySqlXaSink(mariadb_url, table, marker_table=f"missing_{_uid()}"), sink_id, 4)  # logged


# -- options, ids --------------------------------------------------------------------------

def test_from_options_is_case_insensitive_and_translates_urls(mariadb_url, table, sink_id):
    u = sa.make_url(mariadb_url)
    bare = u.set(username=None, password=None).render_as_string(hide_password=False).replace(
        "mysql+pymysql://", "mysql://")
    assert u.username is not None and u.password is not None
    sink = MySqlXaSink.from_options({"URL": bare, "DbTable": table, "USER": u.username, "Password": u.password,
                                     "lockTimeout": "5s", "BATCHSIZE": "3", "isolationLevel": "READ_COMMITTED",
                                     "sessionInitStatement": "SET @twopc_test = 1"})
    assert sink.options.batch_size == 3 and _password(mariadb_url) not in sink.describe()
    sink.validate(_batch([1]).schema)
    assert sink.commit(_prepare(sink, _ctx(sink_id), _batch([1, 2, 3, 4]))) is CommitOutcome.COMMITTED
    jdbc = f"jdbc:mariadb://{u.host}:{u.port}/{u.database}?user={u.username}&password={u.password}"
    via_jdbc = MySqlXaSink.from_options({"url": jdbc, "dbtable": f"{u.database}.{table}"})
    assert via_jdbc.commit(_prepare(via_jdbc, _ctx(sink_id, batch=2), _batch([5]))) is CommitOutcome.COMMITTED
    assert _count(mariadb_url, table) == 5
    with pytest.raises(MissingOptionError, match="dbtable"):
        MySqlXaSink.from_options({"url": mariadb_url})
    with pytest.raises(MissingOptionError, match="url"):
        MySqlXaSink.from_options({"dbtable": table})
    with pytest.raises(ConfigurationError, match="writes to MySQL/MariaDB"):
        MySqlXaSink("postgresql://h/db", table)
    with pytest.raises(ConfigurationError, match="isolationLevel"):
        MySqlXaSink(mariadb_url, table, isolation_level="SNAPSHOT")
    with pytest.raises(ConfigurationError, match="batchsize"):
        MySqlXaSink(mariadb_url, table, batch_size=0)


def test_session_init_statement_runs_once_per_connection_before_xa_start(mariadb_url, table, sink_id):
    log_table = f"init_{_uid()}"
    _sql(mariadb_url, f"CREATE TABLE {log_table} (conn BIGINT, at_pct VARCHAR(10)) ENGINE=InnoDB")
    try:
        sink = _validated(mariadb_url, table, isolation_level="read committed",
                          session_init_statement=f"INSERT INTO {log_table} VALUES (CONNECTION_ID(), '100%')")
        first = sink.begin_transaction(_ctx(sink_id, batch=0))
        sink.invoke_batch(first, _batch([0]))
        sink.rollback(first)  # the connection goes back to the pool...
        second = sink.begin_transaction(_ctx(sink_id, batch=1))  # ...and is reused
        assert second.session_id == first.session_id
        sink.invoke_batch(second, _batch([1]))
        assert sink.commit(sink.pre_commit(second)) is CommitOutcome.COMMITTED  # prepared: connection closed
        assert sink.commit(_prepare(sink, _ctx(sink_id, batch=2), _batch([2]))) is CommitOutcome.COMMITTED
        logged = _sql(mariadb_url, f"SELECT conn, COUNT(*), MIN(at_pct) FROM {log_table} GROUP BY conn ORDER BY 1")
        assert [n for _c, n, _p in logged] == [1, 1] and {p for _c, _n, p in logged} == {"100%"}
        assert logged[0][0] == first.session_id
        assert _sql(mariadb_url, f"SELECT id FROM {table} ORDER BY id") == [(1,), (2,)]
    finally:
        _sql(mariadb_url, f"DROP TABLE {log_table}")


def test_gtrid_longer_than_64_bytes_is_a_configuration_error_naming_the_limit(mariadb_url, table):
    sink = MySqlXaSink(mariadb_url, table)
    long_id = "q" + "x" * 50
    with pytest.raises(ConfigurationError, match="64-byte") as info:
        sink.make_gid(_ctx(long_id, batch=20261122, partition=12, attempt=123456))
    assert "sinkId" in str(info.value)
    with pytest.raises(ConfigurationError, match="sinkId"):
        sink.make_gid(_ctx("bad id'"))
    assert len(sink.make_gid(_ctx("q0123456789abcdef", batch=20261122, partition=199, attempt=1234567))) <= 64
    with pytest.raises(ProtocolError):
        sink.commit(MySqlXaHandle("x'; XA RECOVER; --", "s", 1, 0, 0))


# -- validation -----------------------------------------------------------------------------

def test_xa_probe_says_yes_with_a_reason(mariadb_url):
    ok, reason = MySqlXaSink.probe_xa(mariadb_url)
    assert ok, reason
    assert "InnoDB" in reason and "XA" in reason and _password(mariadb_url) not in reason
    assert MySqlXaSink(mariadb_url, "anything").dialect.xa_available()[0]


def test_validate_missing_table_names_it(mariadb_url):
    name = f"nope_{_uid()}"
    with pytest.raises(SchemaMismatchError, match=f"{name} does not exist"):
        MySqlXaSink(mariadb_url, name).validate(_batch([1]).schema)


def test_validate_lists_every_problem(mariadb_url):
    name = f"t_{_uid()}"
    _sql(mariadb_url, f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, n INT NOT NULL, s VARCHAR(10), "
                      f"g INT AS (id + 1) VIRTUAL, d DATE) ENGINE=InnoDB")
    try:
        schema = pa.schema([("id", pa.string()), ("s", pa.string()), ("extra", pa.int64()),
                            ("g", pa.int32()), ("d", pa.float64())])
        with pytest.raises(SchemaMismatchError) as info:
            MySqlXaSink(mariadb_url, name).validate(schema)
        msg = str(info.value)
        for part in ("column id: DataFrame type string, table type bigint", "column extra: not in table",
                     "column g: table column g is generated", "column d: DataFrame type double",
                     "column n: NOT NULL without default"):
            assert part in msg, msg
        ok = pa.schema([("id", pa.int64()), ("n", pa.int16()), ("d", pa.timestamp("us"))])
        MySqlXaSink(mariadb_url, name).validate(ok)
    finally:
        _sql(mariadb_url, f"DROP TABLE {name}")


def test_validate_refuses_non_innodb_tables_and_views(mariadb_url):
    u = _uid()
    _sql(mariadb_url, f"CREATE TABLE my_{u} (id BIGINT) ENGINE=MyISAM")
    _sql(mariadb_url, f"CREATE TABLE inno_{u} (id BIGINT) ENGINE=InnoDB")
    _sql(mariadb_url, f"CREATE VIEW v_{u} AS SELECT id FROM inno_{u}")
    try:
        with pytest.raises(TargetConfigurationError, match=r"MyISAM.*XA needs InnoDB"):
            MySqlXaSink(mariadb_url, f"my_{u}").validate(pa.schema([("id", pa.int64())]))
        with pytest.raises(TargetConfigurationError, match="view"):
            MySqlXaSink(mariadb_url, f"v_{u}").validate(pa.schema([("id", pa.int64())]))
        with pytest.raises(TargetConfigurationError, match="not a twopc marker table"):
            MySqlXaSink(mariadb_url, f"inno_{u}", marker_table=f"inno_{u}").validate(pa.schema([("id", pa.int64())]))
        with pytest.raises(TargetConfigurationError, match=r"marker table.*MyISAM"):
            _sql(mariadb_url, f"CREATE TABLE mk_{u} (gid VARCHAR(64) PRIMARY KEY, sink_id VARCHAR(64), "
                              f"batch_id BIGINT, partition_id INT, `rows` BIGINT) ENGINE=MyISAM")
            MySqlXaSink(mariadb_url, f"inno_{u}", marker_table=f"mk_{u}").validate(pa.schema([("id", pa.int64())]))
    finally:
        _sql(mariadb_url, f"DROP VIEW v_{u}")
        _sql(mariadb_url, f"DROP TABLE IF EXISTS my_{u}, inno_{u}, mk_{u}")


def test_validate_wrong_password_is_unavailable_and_never_shows_the_password(mariadb_url, table):
    pw = _password(mariadb_url)
    wrong = f"Wr0ng-{_uid()}-secret"
    url = sa.make_url(mariadb_url).set(password=wrong).render_as_string(hide_password=False)
    sink = MySqlXaSink(url, table)
    for call in (lambda: sink.validate(_batch([1]).schema), lambda: sink.begin_transaction(_ctx("s_x")),
                 lambda: sink.list_prepared("s_x")):
        with pytest.raises(SinkUnavailableError) as info:
            call()
        for e in _chain(info.value):
            assert wrong not in str(e) and pw not in str(e) and wrong not in repr(e)
        assert "1045" in str(info.value) and "password" in str(info.value)
        host = sa.make_url(mariadb_url).host
        assert host is not None
        assert host in str(info.value)
        assert info.value.__cause__ is None
    assert wrong not in sink.describe() and wrong not in repr(sink)
    ok, reason = MySqlXaSink.probe_xa(url)
    assert not ok and wrong not in reason and "1045" in reason


def test_unreachable_port_is_unavailable(mariadb_url, table):
    from twopc.faultinject._procutil import free_port

    url = sa.make_url(mariadb_url).set(port=free_port()).render_as_string(hide_password=False)
    sink = MySqlXaSink(url, table, connect_timeout=2)
    with pytest.raises(SinkUnavailableError, match="cannot connect") as info:
        sink.validate(_batch([1]).schema)
    assert _password(mariadb_url) not in "".join(str(e) for e in _chain(info.value))
    assert MySqlXaSink.probe_xa(url, connect_timeout=2)[0] is False


# -- data errors ----------------------------------------------------------------------------

@pytest.mark.parametrize("via", ["arrow", "dict"])
def test_duplicate_key_is_a_sink_error_naming_the_key_and_leaves_nothing(mariadb_url, table, sink_id, via):
    sink = _validated(mariadb_url, table)
    assert sink.commit(_prepare(sink, _ctx(sink_id, batch=0), _batch([1]))) is CommitOutcome.COMMITTED
    txn = sink.begin_transaction(_ctx(sink_id, batch=1))
    with pytest.raises(SinkError) as info:
        if via == "arrow":
            sink.invoke_batch(txn, _batch([5, 6]))
            sink.invoke_batch(txn, _batch([1]))  # collides with the committed row
        else:
            for i in (5, 6, 5):  # collides within the transaction
                sink.invoke(txn, {"id": i})
            sink.pre_commit(txn)
    msg = str(info.value)
    assert "unique constraint" in msg and "PRIMARY" in msg and "rolled back" in msg, msg
    assert not isinstance(info.value, SinkUnavailableError)
    sink.rollback(txn)
    assert _recovered(mariadb_url, sink_id) == []  # nothing prepared
    assert _sql(mariadb_url, f"SELECT id FROM {table}") == [(1,)]  # nothing of the attempt written
    with pytest.raises(SinkError, match="rolled back"):
        sink.pre_commit(txn)


@pytest.mark.parametrize(("row", "named"), [
    ({"id": 1, "qty": None, "ref": None}, "NOT NULL constraint violated (column 'qty')"),
    ({"id": 1, "qty": -1, "ref": None}, "check constraint violated (constraint 'qty_positive')"),
    ({"id": 1, "qty": 1, "ref": 99}, "foreign key constraint violated (constraint 'ref_exists')"),
])
def test_a_violated_constraint_is_named_by_its_kind_and_name(mariadb_url, table, sink_id, row, named):
    parent = f"{table}_parent"
    _sql(mariadb_url, f"DROP TABLE {table}")
    _sql(mariadb_url, f"CREATE TABLE {parent} (id BIGINT PRIMARY KEY) ENGINE=InnoDB")
    try:
        _sql(mariadb_url, f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, qty BIGINT NOT NULL, ref BIGINT, "
                          f"CONSTRAINT qty_positive CHECK (qty > 0), CONSTRAINT ref_exists FOREIGN KEY (ref) "
                          f"REFERENCES {parent} (id)) ENGINE=InnoDB")
        sink = _validated(mariadb_url, table, pa.schema([("id", pa.int64()), ("qty", pa.int64()),
                                                         ("ref", pa.int64())]))
        txn = sink.begin_transaction(_ctx(sink_id))
        with pytest.raises(SinkError) as info:
            sink.invoke(txn, row)
            sink.pre_commit(txn)
        assert named in str(info.value) and "rolled back" in str(info.value), str(info.value)
        sink.rollback(txn)
    finally:
        _sql(mariadb_url, f"DROP TABLE IF EXISTS {table}")
        _sql(mariadb_url, f"DROP TABLE IF EXISTS {parent}")


@pytest.mark.parametrize("via", ["arrow", "dict"])
def test_not_null_violation_names_the_column_and_leaves_nothing(mariadb_url, sink_id, via):
    name = f"nn_{_uid()}"
    _sql(mariadb_url, f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, s VARCHAR(20) NOT NULL) ENGINE=InnoDB")
    try:
        sink = _validated(mariadb_url, name, pa.schema([("id", pa.int64()), ("s", pa.string())]))
        txn = sink.begin_transaction(_ctx(sink_id))
        with pytest.raises(SinkError) as info:
            if via == "arrow":
                sink.invoke_batch(txn, pa.record_batch({"id": pa.array([1, 2], pa.int64()), "s": ["a", None]}))
            else:
                sink.invoke(txn, {"id": 1, "s": "a"})
                sink.invoke(txn, {"id": 2, "s": None})
                sink.pre_commit(txn)
        assert "NOT NULL" in str(info.value) and "'s'" in str(info.value)
        assert _recovered(mariadb_url, sink_id) == [] and _count(mariadb_url, name) == 0
    finally:
        _sql(mariadb_url, f"DROP TABLE {name}")


def test_too_long_value_names_the_column(mariadb_url, sink_id):
    name = f"tl_{_uid()}"
    _sql(mariadb_url, f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, code VARCHAR(3)) ENGINE=InnoDB")
    try:
        sink = _validated(mariadb_url, name, pa.schema([("id", pa.int64()), ("code", pa.string())]))
        with pytest.raises(SinkError, match="too long for column 'code'"):
            _prepare(sink, _ctx(sink_id), pa.record_batch({"id": pa.array([1], pa.int64()), "code": ["abcd"]}))
        assert _recovered(mariadb_url, sink_id) == [] and _count(mariadb_url, name) == 0
    finally:
        _sql(mariadb_url, f"DROP TABLE {name}")


@pytest.mark.parametrize("via", ["arrow", "dict"])
def test_nul_byte_is_a_clear_error_and_leaves_nothing(mariadb_url, table, sink_id, via):
    sink = _validated(mariadb_url, table)
    txn = sink.begin_transaction(_ctx(sink_id))
    sink.invoke_batch(txn, _batch([1]))
    with pytest.raises(ConfigurationError, match=r"column 's'.*NUL"):
        if via == "arrow":
            sink.invoke_batch(txn, _batch([2, 3], s=["ok", "bad\x00byte"]))
        else:
            sink.invoke(txn, {"id": 2, "s": "bad\x00byte"})
            sink.pre_commit(txn)
    assert _recovered(mariadb_url, sink_id) == [] and _count(mariadb_url, table) == 0
    with pytest.raises(SinkError, match="rolled back"):
        sink.invoke_batch(txn, _batch([4]))


def test_nan_is_refused_naming_the_column(mariadb_url, table, sink_id):
    sink = _validated(mariadb_url, table)
    with pytest.raises(ConfigurationError, match=r"column 'x'.*NaN"):
        _prepare(sink, _ctx(sink_id), _batch([1], x=[float("nan")]))
    assert _recovered(mariadb_url, sink_id) == [] and _count(mariadb_url, table) == 0


def test_unknown_column_in_a_batch_is_a_schema_mismatch(mariadb_url, table, sink_id):
    sink = _validated(mariadb_url, table)
    txn = sink.begin_transaction(_ctx(sink_id))
    with pytest.raises(SchemaMismatchError, match="nope"):
        sink.invoke_batch(txn, pa.record_batch({"id": pa.array([1], pa.int64()), "nope": [1]}))
    assert _recovered(mariadb_url, sink_id) == []


def test_lock_timeout_fails_fast_when_a_prepared_attempt_holds_the_rows(mariadb_url, table, sink_id):
    sink = _validated(mariadb_url, table, lock_timeout=1)
    holder = _prepare(sink, _ctx(sink_id, attempt=1), _batch([1]))  # a dead attempt's prepared txn
    txn = sink.begin_transaction(_ctx(sink_id, attempt=2))
    with pytest.raises(SinkError, match="lock timeout") as info:
        sink.invoke_batch(txn, _batch([1]))
        sink.pre_commit(txn)
    assert "recovery" in str(info.value)
    assert [h.txn_id for h in sink.list_prepared(sink_id)] == [holder.txn_id]
    sink.abort(holder)
    assert sink.commit(_prepare(sink, _ctx(sink_id, attempt=3), _batch([1]))) is CommitOutcome.COMMITTED


# -- quoting ------------------------------------------------------------------------------

def test_names_needing_quotes_work_and_cannot_inject(mariadb_url, sink_id):
    u = _uid()
    db = sa.make_url(mariadb_url).database
    weird, victim = f"Weird `Table` {u} 100%", f"victim_{u}"
    qweird = "`" + weird.replace("`", "``") + "`"
    _sql(mariadb_url, f"CREATE TABLE {qweird} (`select` INT, `Mixed Col` TEXT, `back``tick %s` TEXT) ENGINE=InnoDB")
    _sql(mariadb_url, f"CREATE TABLE {victim} (a INT) ENGINE=InnoDB")
    marker = f"m{u}`; DROP TABLE {victim}; --"
    try:
        schema = pa.schema([("select", pa.int32()), ("Mixed Col", pa.string()), ("back`tick %s", pa.string())])
        sink = _validated(mariadb_url, f"`{db}`.{qweird}", schema,
                          marker_table="`" + marker.replace("`", "``") + "`")
        batch = pa.record_batch({"select": pa.array([1], pa.int32()), "Mixed Col": ["m"], "back`tick %s": ["q"]})
        h = _prepare(sink, _ctx(sink_id), batch)
        assert h.table == f"{db}.{qweird}"
        assert sink.commit(h) is CommitOutcome.COMMITTED
        txn = sink.begin_transaction(_ctx(sink_id, partition=1))
        sink.invoke(txn, {"select": 2, "Mixed Col": "d", "back`tick %s": "%s"})
        assert sink.commit(sink.pre_commit(txn)) is CommitOutcome.COMMITTED
        assert _sql(mariadb_url, f"SELECT `select`, `Mixed Col`, `back``tick %s` FROM {qweird} ORDER BY 1") == [
            (1, "m", "q"), (2, "d", "%s")]
        assert sink.purge_markers(sink_id, below_batch=10) == 2
        for evil in (f"`x``; DROP TABLE {victim}; --`", f"`{victim}; DROP TABLE {victim}`"):
            with pytest.raises(SchemaMismatchError, match="does not exist"):
                MySqlXaSink(mariadb_url, evil).validate(pa.schema([("a", pa.int32())]))
        with pytest.raises(ConfigurationError, match="backticks"):
            MySqlXaSink(mariadb_url, f"{victim}; DROP TABLE {victim}")
        assert _sql(mariadb_url, f"SELECT COUNT(*) FROM {victim}") == [(0,)]  # the victim survived
    finally:
        _sql(mariadb_url, f"DROP TABLE IF EXISTS {qweird}, {victim}, `{marker.replace('`', '``')}`")


def _validated(url: str, table: str, schema: pa.Schema | None = None, **kw: Any) -> MySqlXaSink:
    return validated(MySqlXaSink, url, table, schema, **kw)
