"""PostgresSink against a real PostgreSQL (the ``postgres_url`` / ``pg_engine`` fixtures):
what only this sink does (GIDs and marker rows, sessions dying, lock timeouts, validation
errors, COPY encodings, quoting). The protocol contract every sink shares (commit
idempotent, lost after rollback, abort refused after commit, list_prepared, envelope,
pickling, coordinator and recovery) runs through the conformance kit in test_kit_sinks.py."""

from __future__ import annotations

import datetime as dt
import decimal
import gc
import json
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twopc import CommitOutcome, ConfigurationError, SinkError
from twopc._sink import purge_markers_best_effort
from twopc.faultinject import LocalPostgres
from twopc.sinks import PostgresHandle, PostgresSink
from twopc.sinks.sql import dispose_engines
from twopc.spi import (
    MissingOptionError,
    ProtocolError,
    SchemaMismatchError,
    SinkUnavailableError,
    TargetConfigurationError,
)
from twopc.spi.runtime import dumps_handle, loads_handle

from tests._sql_helpers import batch as _batch
from tests._sql_helpers import chain as _chain
from tests._sql_helpers import ctx as _ctx
from tests._sql_helpers import password as _password
from tests._sql_helpers import prepare as _prepare
from tests._sql_helpers import uid as _uid
from tests._sql_helpers import validated

FORMATS = ["binary", "csv"]


# -- helpers ----------------------------------------------------------------------------


@pytest.fixture
def sink_id(pg_engine: sa.Engine) -> Iterator[str]:
    """A fresh sink id; prepared transactions a failed test left behind are rolled back."""
    sid = f"s_{_uid()}"
    yield sid
    _roll_back_leftovers(pg_engine, sid)


def _roll_back_leftovers(engine: sa.Engine, sink_id: str) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        for (gid,) in c.exec_driver_sql(
                "SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, %(p)s)", {"p": f"twopc:{sink_id}:"}):
            c.exec_driver_sql(f"ROLLBACK PREPARED '{gid}'")


@pytest.fixture
def table(pg_engine: sa.Engine, sink_id: str) -> Iterator[str]:
    """A fresh table ``t_<uid> (id bigint primary key, s text, x double precision)``."""
    name = f"t_{_uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {name} (id bigint PRIMARY KEY, s text, x double precision)")
    yield name
    _roll_back_leftovers(pg_engine, sink_id)
    with pg_engine.begin() as c:
        c.exec_driver_sql("SET LOCAL lock_timeout = '10s'")
        c.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")


def _rows(engine: sa.Engine, sql_text: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    with engine.connect() as c:
        return [tuple(r) for r in c.exec_driver_sql(sql_text, params or {}).fetchall()]


def _prepared_gids(engine: sa.Engine, sink_id: str) -> list[str]:
    return [r[0] for r in _rows(engine, "SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, %(p)s) "
                                        "ORDER BY gid", {"p": f"twopc:{sink_id}:"})]


# -- the protocol -------------------------------------------------------------------------

def test_prepare_then_commit_makes_rows_visible_once_with_a_marker(postgres_url, pg_engine, table, sink_id):
    sink = _validated(postgres_url, table)
    h = _prepare(sink, _ctx(sink_id, batch=7, partition=3, attempt=42), _batch([1, 2]), _batch([3]))
    assert h.txn_id.startswith(f"twopc:{sink_id}:7:3:42:") and len(h.txn_id.encode()) <= 199
    assert (h.sink_id, h.batch_id, h.partition_id, h.attempt_id, h.rows, h.table) == (sink_id, 7, 3, 42, 3, table)
    assert _rows(pg_engine, f"SELECT count(*) FROM {table}") == [(0,)]  # prepared: invisible
    assert _prepared_gids(pg_engine, sink_id) == [h.txn_id]
    assert sink.commit(h) is CommitOutcome.COMMITTED
    assert _rows(pg_engine, f"SELECT id, s, x FROM {table} ORDER BY id") == [(1, "v1", 0.5), (2, "v2", 1.0),
                                                                              (3, "v3", 1.5)]
    assert _rows(pg_engine, f"SELECT sink_id, batch_id, partition_id, rows FROM twopc_markers "
                            f"WHERE gid = '{h.txn_id}'") == [(sink_id, 7, 3, 3)]
    assert _prepared_gids(pg_engine, sink_id) == []
    sink.close()


def test_prepared_transaction_survives_close_gc_and_pool_disposal(postgres_url, pg_engine, table, sink_id):
    sink = _validated(postgres_url, table)
    h = _prepare(sink, _ctx(sink_id), _batch([1, 2, 3]))
    envelope = dumps_handle(h)
    sink.close()
    del sink
    gc.collect()
    dispose_engines()  # closes every pooled session of this process
    # kill every other session of the test user too: a prepared transaction belongs to no session
    with pg_engine.connect() as c:
        c.exec_driver_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE application_name = 'twopc' AND pid <> pg_backend_pid()")
    assert _prepared_gids(pg_engine, sink_id) == [h.txn_id]
    fresh = PostgresSink(postgres_url, table)  # a brand-new engine, as on a restarted driver
    handle = loads_handle(envelope)
    assert isinstance(handle, PostgresHandle) and handle == h
    assert fresh.commit(handle) is CommitOutcome.COMMITTED
    assert _rows(pg_engine, f"SELECT count(*) FROM {table}") == [(3,)]


def test_a_rolled_back_transaction_refuses_more_rows(postgres_url, pg_engine, table, sink_id):
    """(That rollback leaves nothing is the conformance kit's: test_kit_sinks.py.)"""
    sink = _validated(postgres_url, table)
    txn = sink.begin_transaction(_ctx(sink_id))
    sink.invoke_batch(txn, _batch([1, 2]))
    sink.rollback(txn)
    with pytest.raises(SinkError, match="rolled back"):
        sink.invoke_batch(txn, _batch([3]))
    assert _rows(pg_engine, f"SELECT count(*) FROM {table}") == [(0,)]


def test_rollback_never_raises_when_the_connection_died(postgres_url, pg_engine, table, sink_id):
    sink = _validated(postgres_url, table)
    txn = sink.begin_transaction(_ctx(sink_id))
    sink.invoke_batch(txn, _batch([1]))
    pid = txn.conn.driver_connection.info.backend_pid  # type: ignore[union-attr]  # open: a batch went in
    with pg_engine.connect() as c:
        c.exec_driver_sql(f"SELECT pg_terminate_backend({pid})")
    sink.rollback(txn)
    sink.close()
    assert _rows(pg_engine, f"SELECT count(*) FROM {table}") == [(0,)]


def test_commit_survives_a_dead_control_connection(postgres_url, pg_engine, table, sink_id):
    sink = _validated(postgres_url, table)
    h = _prepare(sink, _ctx(sink_id), _batch([1]))
    sink.list_prepared(sink_id)  # opens the control connection
    pid = sink.target._control.driver_connection.info.backend_pid  # type: ignore[union-attr]  # list_prepared opened it
    with pg_engine.connect() as c:
        c.exec_driver_sql(f"SELECT pg_terminate_backend({pid})")
    assert sink.commit(h) is CommitOutcome.COMMITTED  # replaced and retried once
    assert sink.commit(h) is CommitOutcome.ALREADY_COMMITTED


def test_prepare_of_an_aborted_transaction_is_detected(postgres_url, pg_engine, table, sink_id):
    """PostgreSQL answers ROLLBACK, without an error, to PREPARE of an aborted transaction."""
    sink = _validated(postgres_url, table)
    txn = sink.begin_transaction(_ctx(sink_id))
    sink.invoke_batch(txn, _batch([1]))
    txn.loader.end()  # the COPY stays open across batches; finish it to use the session
    pg: Any = txn.conn.driver_connection  # type: ignore[union-attr]  # open: a batch went in
    with pytest.raises(psycopg.errors.DivisionByZero):
        pg.execute("SELECT 1/0")  # aborts the transaction behind the sink's back
    with pytest.raises(SinkError) as info:
        sink.pre_commit(txn)
    assert "ROLLBACK" in str(info.value) or "aborted" in str(info.value)
    sink.rollback(txn)
    assert _prepared_gids(pg_engine, sink_id) == []
    assert _rows(pg_engine, f"SELECT count(*) FROM {table}") == [(0,)]


def test_close_rolls_back_open_transactions_but_not_prepared_ones(postgres_url, pg_engine, table, sink_id):
    sink = _validated(postgres_url, table)
    h = _prepare(sink, _ctx(sink_id, partition=0), _batch([1]))
    open_txn = sink.begin_transaction(_ctx(sink_id, partition=1))
    sink.invoke_batch(open_txn, _batch([2]))
    sink.close()
    assert _prepared_gids(pg_engine, sink_id) == [h.txn_id]
    assert sink.commit(h) is CommitOutcome.COMMITTED  # usable after close
    assert _rows(pg_engine, f"SELECT id FROM {table}") == [(1,)]


def test_purge_markers_deletes_only_older_batches_of_the_sink(postgres_url, pg_engine, table, sink_id):
    sink = _validated(postgres_url, table)
    for b in (1, 2, 3):
        assert sink.commit(_prepare(sink, _ctx(sink_id, batch=b), _batch([b]))) is CommitOutcome.COMMITTED
    assert sink.purge_markers(sink_id, below_batch=3) == 2
    assert _rows(pg_engine, f"SELECT batch_id FROM twopc_markers WHERE sink_id = '{sink_id}'") == [(3,)]
    purge_markers_best_effort(sink, sink_id, below_batch=4)  # the runtime's call
    assert _rows(pg_engine, f"SELECT count(*) FROM twopc_markers WHERE sink_id = '{sink_id}'") == [(0,)]
    broken = PostgresSink(postgres_url, table, marker_table=f"missing_{_uid()}")
    purge_markers_best_effort(broken, sink_id, below_batch=4)  # logged, not raised


# -- options, ids --------------------------------------------------------------------------

def test_from_options_is_case_insensitive_and_translates_urls(postgres_url):
    u = sa.make_url(postgres_url)
    pw = _password(postgres_url)
    assert u.username is not None
    s = PostgresSink.from_options({"URL": f"postgresql://{u.host}:{u.port}/{u.database}", "DbTable": "Public.T1",
                                   "user": u.username, "PASSWORD": pw, "markertable": "ops.Markers",
                                   "locktimeout": "500ms"})
    assert s.target.table_label == "public.t1" and s.target.marker_label == "ops.markers"
    assert pw not in s.describe() and pw not in repr(s)
    assert f"{u.host}:{u.port}/{u.database}" in s.describe() and "public.t1" in s.describe()
    j = PostgresSink.from_options({"url": f"jdbc:postgresql://{u.host}:{u.port}/{u.database}?user={u.username}"
                                          f"&password={pw}&ssl=false&loggerLevel=OFF", "table": "t"})
    ju = j.options.url
    assert (ju.drivername, ju.host, ju.port, ju.database, ju.username, ju.password) == (
        "postgresql+psycopg", u.host, u.port, u.database, u.username, pw)
    q = PostgresSink(f"postgresql://{u.host}:{u.port}/{u.database}?user={u.username}&password={pw}", "t")
    assert pw not in q.describe() and q.options.url.password == pw
    with pytest.raises(MissingOptionError, match="url"):
        PostgresSink.from_options({"dbtable": "t"})
    with pytest.raises(MissingOptionError, match="dbtable"):
        PostgresSink.from_options({"url": postgres_url})
    with pytest.raises(ConfigurationError, match="lockTimeout"):
        PostgresSink(postgres_url, "t", lock_timeout="soon")
    with pytest.raises(ConfigurationError, match="double quotes"):
        PostgresSink(postgres_url, "Weird Table")
    with pytest.raises(ConfigurationError, match="writes to PostgreSQL"):
        PostgresSink("mysql://h/db", "t")


def test_gid_validation(postgres_url, table):
    sink = PostgresSink(postgres_url, table)
    with pytest.raises(ConfigurationError, match="sinkId"):
        sink.begin_transaction(_ctx("bad:id"))
    bad = PostgresHandle("twopc:x:1:0:1:abcd'; DROP TABLE x; --", "x", 1, 0, 1, table=table, rows=1)
    with pytest.raises(ProtocolError):
        sink.commit(bad)
    with pytest.raises(ProtocolError):
        sink.abort(bad)
    longest = sink.make_gid(_ctx("z" * 64, batch=2**63 - 1, partition=2**31 - 1, attempt=2**63 - 1))
    assert len(longest.encode()) <= 199 and sink.parse_gid(longest) is not None


# -- validate ---------------------------------------------------------------------------

def test_validate_missing_table_names_it(postgres_url):
    sink = PostgresSink(postgres_url, f"nope_{_uid()}")
    with pytest.raises(SchemaMismatchError, match=r"nope_\w+ does not exist.*create it"):
        sink.validate(_batch([1]).schema)


def test_validate_lists_type_mismatches_and_missing_columns(postgres_url, pg_engine):
    name = f"t_{_uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {name} (id text, s text, x double precision, "
                          f"req int NOT NULL, opt int, dflt int NOT NULL DEFAULT 1)")
    schema = pa.schema([("id", pa.int64()), ("s", pa.string()), ("ghost", pa.bool_()), ("X", pa.float32())])
    with pytest.raises(SchemaMismatchError) as info:
        PostgresSink(postgres_url, name).validate(schema)
    msg = str(info.value)
    assert "column id: DataFrame type int64, table type text" in msg
    assert "column ghost: not in table" in msg
    assert "column req: NOT NULL without default" in msg
    assert "opt" not in msg.split("Table columns")[0] and "dflt" not in msg.split("Table columns")[0]
    assert "column s" not in msg and "column X" not in msg  # compatible (X matches x case-insensitively)


def test_validate_accepts_compatible_types_and_creates_the_marker_table(postgres_url, pg_engine):
    name, marker = f"t_{_uid()}", f"m_{_uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(
            f"CREATE TABLE {name} (a smallint, b bigint, c numeric, d real, e varchar(10), f char(3), "
            f"g jsonb, h boolean, i timestamptz, j timestamp, k date, l numeric(10,2), m bytea, n uuid)")
    schema = pa.schema([("a", pa.int8()), ("b", pa.int32()), ("c", pa.int64()), ("d", pa.float64()),
                        ("e", pa.string()), ("f", pa.large_string()), ("g", pa.string()), ("h", pa.bool_()),
                        ("i", pa.timestamp("us", "UTC")), ("j", pa.timestamp("us")), ("k", pa.date32()),
                        ("l", pa.decimal128(10, 2)), ("m", pa.binary()), ("n", pa.string())])
    PostgresSink(postgres_url, name, marker_table=marker).validate(schema)
    assert _rows(pg_engine, f"SELECT to_regclass('{marker}') IS NOT NULL") == [(True,)]
    PostgresSink(postgres_url, name, marker_table=marker).validate(schema)  # idempotent
    with pytest.raises(TargetConfigurationError, match="not a twopc marker table"):
        PostgresSink(postgres_url, name, marker_table=name).validate(schema)


def test_validate_wrong_password_is_unavailable_and_never_shows_the_password(postgres_url, table):
    pw = _password(postgres_url)
    wrong = f"Wr0ng-{_uid()}-secret"
    url = sa.make_url(postgres_url).set(password=wrong).render_as_string(hide_password=False)
    for sink in (PostgresSink(url, table), PostgresSink(postgres_url, table, password=wrong)):
        with pytest.raises(SinkUnavailableError) as info:
            sink.validate(_batch([1]).schema)
        for e in _chain(info.value):
            assert wrong not in str(e) and pw not in str(e) and wrong not in repr(e)
        host = sa.make_url(postgres_url).host
        assert host is not None
        assert "password" in str(info.value) and host in str(info.value)
        assert info.value.__cause__ is None
        assert wrong not in sink.describe()


def test_validate_unreachable_port_is_unavailable(postgres_url, table):
    from twopc.faultinject._procutil import free_port

    url = sa.make_url(postgres_url).set(port=free_port()).render_as_string(hide_password=False)
    sink = PostgresSink(url, table, connect_timeout=2)
    with pytest.raises(SinkUnavailableError, match="cannot connect") as info:
        sink.validate(_batch([1]).schema)
    assert _password(postgres_url) not in "".join(str(e) for e in _chain(info.value))
    with pytest.raises(SinkUnavailableError):
        sink.begin_transaction(_ctx("s_x"))


def test_validate_without_prepared_transactions_says_how_to_fix():
    server = LocalPostgres(max_prepared_transactions=0)
    server.start()
    try:
        sink = PostgresSink(server.url, "t")
        with pytest.raises(TargetConfigurationError) as info:
            sink.validate(_batch([1]).schema)
        msg = str(info.value)
        assert "max_prepared_transactions" in msg and "postgresql.conf" in msg and "restart" in msg
        sink.close()
    finally:
        dispose_engines()
        server.stop()


# -- data errors ----------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_nul_byte_is_a_clear_error_and_leaves_nothing(postgres_url, pg_engine, table, sink_id, fmt):
    sink = _validated(postgres_url, table, copy_format=fmt)
    txn = sink.begin_transaction(_ctx(sink_id))
    sink.invoke_batch(txn, _batch([1]))
    with pytest.raises(ConfigurationError, match=r"column 's'.*row 1.*NUL byte"):
        sink.invoke_batch(txn, _batch([2, 3], s=["ok", "bad\x00value"]))
    sink.rollback(txn)
    assert _prepared_gids(pg_engine, sink_id) == []
    assert _rows(pg_engine, f"SELECT count(*) FROM {table}") == [(0,)]
    txn = sink.begin_transaction(_ctx(sink_id, partition=1))
    with pytest.raises(ConfigurationError, match="NUL"):
        sink.invoke(txn, {"id": 5, "s": "a\x00"})
        sink.pre_commit(txn)
    sink.rollback(txn)
    assert _prepared_gids(pg_engine, sink_id) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_not_null_violation_names_the_column_and_leaves_nothing(postgres_url, pg_engine, sink_id, fmt):
    name = f"t_{_uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {name} (id bigint PRIMARY KEY, s text NOT NULL, x float8)")
    sink = _validated(postgres_url, name, copy_format=fmt)
    txn = sink.begin_transaction(_ctx(sink_id))
    sink.invoke_batch(txn, _batch([1]))
    with pytest.raises(SinkError, match=r"NOT NULL constraint violated \(column 's'") as info:
        sink.invoke_batch(txn, _batch([2, 3], s=["fine", None]))
        sink.pre_commit(txn)  # the server may only report it when the COPY ends
    assert "rolled back" in str(info.value)
    sink.rollback(txn)
    with pytest.raises(SinkError):
        sink.pre_commit(txn)  # the transaction is gone: it cannot be prepared
    assert _prepared_gids(pg_engine, sink_id) == []
    assert _rows(pg_engine, f"SELECT count(*) FROM {name}") == [(0,)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_unique_violation_names_the_constraint(postgres_url, pg_engine, table, sink_id, fmt):
    sink = _validated(postgres_url, table, copy_format=fmt)
    txn = sink.begin_transaction(_ctx(sink_id))
    with pytest.raises(SinkError, match=rf"unique constraint violated \(constraint '{table}_pkey'\).*\(id\)=\(1\)"):
        sink.invoke_batch(txn, _batch([1, 1]))
        sink.pre_commit(txn)  # the server may only report it when the COPY ends
    sink.rollback(txn)
    assert _prepared_gids(pg_engine, sink_id) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_out_of_range_integer_is_a_sink_error(postgres_url, pg_engine, sink_id, fmt):
    name = f"t_{_uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {name} (id integer)")
    sink = _validated(postgres_url, name, pa.schema([("id", pa.int64())]), copy_format=fmt)
    txn = sink.begin_transaction(_ctx(sink_id))
    with pytest.raises(SinkError, match="out of range"):
        sink.invoke_batch(txn, pa.record_batch({"id": pa.array([1, 2**40], pa.int64())}))
        sink.pre_commit(txn)  # the server may only report it when the COPY ends
    sink.rollback(txn)
    assert _rows(pg_engine, f"SELECT count(*) FROM {name}") == [(0,)]


def test_unknown_column_in_a_batch_is_a_schema_mismatch(postgres_url, table, sink_id):
    sink = _validated(postgres_url, table)
    txn = sink.begin_transaction(_ctx(sink_id))
    evil = 'x") FROM STDIN; DROP TABLE victim; --'
    with pytest.raises(SchemaMismatchError, match="not in table"):
        sink.invoke_batch(txn, pa.record_batch({"id": pa.array([1], pa.int64()), evil: pa.array([1])}))
    sink.rollback(txn)


def test_lock_timeout_fails_fast_with_a_clear_error(postgres_url, pg_engine, table, sink_id):
    """Attempt A prepared key 1 and holds its lock; attempt B writing key 1 fails after the
    lock timeout instead of hanging."""
    a = _validated(postgres_url, table)
    b = PostgresSink(postgres_url, table, lock_timeout="500ms")
    ha = _prepare(a, _ctx(sink_id, partition=0, attempt=1), _batch([1]))
    result: dict[str, BaseException | None] = {}

    def attempt_b() -> None:
        try:
            _prepare(b, _ctx(sink_id, partition=0, attempt=2), _batch([1]))
            result["exc"] = None
        except BaseException as exc:  # noqa: BLE001 - the thread hands whatever it raised to the test
            result["exc"] = exc

    t = threading.Thread(target=attempt_b, daemon=True)
    t.start()
    t.join(60)
    try:
        assert not t.is_alive(), "attempt B hung on the prepared transaction's lock"
        exc = result["exc"]
        assert isinstance(exc, SinkError), exc
        assert "held by another prepared transaction" in str(exc)
        assert "prepared transaction of an earlier attempt" in str(exc)
        assert "rolls back at the next recovery" in str(exc)
        assert [h.txn_id for h in a.list_prepared(sink_id)] == [ha.txn_id]  # B left nothing
    finally:
        a.abort(ha)
    assert _rows(pg_engine, f"SELECT count(*) FROM {table}") == [(0,)]
    assert _prepare(b, _ctx(sink_id, partition=0, attempt=3), _batch([1])) is not None  # lock gone
    b.abort(b.list_prepared(sink_id)[0])


# -- quoting ------------------------------------------------------------------------------

def test_names_needing_quotes_work_and_cannot_inject(postgres_url, pg_engine, sink_id):
    u = _uid()
    weird, victim = f"Weird Table {u}", f"victim_{u}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f'CREATE TABLE "{weird}" ("select" int, "Mixed Col" text, """q""" text)')
        c.exec_driver_sql(f"CREATE TABLE {victim} (a int)")
    sink = _validated(postgres_url, f'public."{weird}"',
                      pa.schema([("select", pa.int32()), ("Mixed Col", pa.string()), ('"q"', pa.string())]))
    batch = pa.record_batch({"select": pa.array([1], pa.int32()), "Mixed Col": ["m"], '"q"': ["quoted"]})
    assert sink.commit(_prepare(sink, _ctx(sink_id), batch)) is CommitOutcome.COMMITTED
    h = _prepare(sink, _ctx(sink_id, partition=1), batch)
    assert h.table == f'public."{weird}"'
    sink.commit(h)
    assert _rows(pg_engine, f'SELECT "select", "Mixed Col", """q""" FROM "{weird}"') == [(1, "m", "quoted")] * 2
    for evil in (f'"x""; DROP TABLE {victim}; --"', f'"{victim}; DROP TABLE {victim}"'):
        with pytest.raises(SchemaMismatchError, match="does not exist"):
            PostgresSink(postgres_url, evil).validate(pa.schema([("a", pa.int32())]))
    evil_marker = PostgresSink(postgres_url, f'"{weird}"', marker_table=f'"m{u}"" (x int); DROP TABLE {victim}; --"')
    evil_marker.validate(pa.schema([("select", pa.int32())]))
    assert _rows(pg_engine, f"SELECT count(*) FROM {victim}") == [(0,)]  # the victim survived
    with pg_engine.begin() as c:
        c.exec_driver_sql(f'DROP TABLE "{weird}", {victim}')
        c.exec_driver_sql(f'DROP TABLE "m{u}"" (x int); DROP TABLE {victim}; --"')


def test_missing_mixed_case_table_suggests_quoting(postgres_url, pg_engine):
    name = f"CamelCase{_uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f'CREATE TABLE "{name}" (id bigint)')
    with pytest.raises(SchemaMismatchError, match="Did you mean"):
        PostgresSink(postgres_url, name).validate(pa.schema([("id", pa.int64())]))
    PostgresSink(postgres_url, f'"{name}"').validate(pa.schema([("id", pa.int64())]))


def test_domains_resolve_to_their_base_type_and_check_violations_name_the_constraint(
        postgres_url, pg_engine, sink_id):
    u = _uid()
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE DOMAIN d1_{u} AS text")
        c.exec_driver_sql(f"CREATE DOMAIN d2_{u} AS d1_{u} CONSTRAINT not_bad_{u} CHECK (VALUE <> 'bad')")
        c.exec_driver_sql(f"CREATE TABLE t_{u} (id bigint, s d2_{u})")
    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
    sink = _validated(postgres_url, f"t_{u}", schema)  # binary COPY through the domain's base type
    sink.commit(_prepare(sink, _ctx(sink_id), pa.record_batch({"id": [1], "s": ["good"]}, schema=schema)))
    assert _rows(pg_engine, f"SELECT s FROM t_{u}") == [("good",)]
    with pytest.raises(SinkError, match=f"check constraint violated.*not_bad_{u}"):
        _prepare(sink, _ctx(sink_id, partition=1), pa.record_batch({"id": [2], "s": ["bad"]}, schema=schema))
    with pytest.raises(TargetConfigurationError, match="schema does not exist"):
        _validated(postgres_url, f"t_{u}", schema, marker_table=f"nosuchschema_{u}.markers")
    assert _prepared_gids(pg_engine, sink_id) == []


# -- data round trips -----------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_null_and_empty_string_round_trip(postgres_url, pg_engine, table, sink_id, fmt):
    sink = _validated(postgres_url, table, copy_format=fmt)
    values = ["", None, " ", '""', "NULL", "\\N", "a,b", 'q"x', "line\n\\.\nnext", "\\.", "é ☃ 𝄞", "\r\n", "\t"]
    ids = list(range(len(values)))
    sink.commit(_prepare(sink, _ctx(sink_id), _batch(ids, s=values, x=[None if i % 2 else 1.5 for i in ids])))
    got = _rows(pg_engine, f"SELECT s, s IS NULL, x FROM {table} ORDER BY id")
    assert [g[0] for g in got] == values
    assert [g[1] for g in got] == [v is None for v in values]
    assert [g[2] for g in got] == [None if i % 2 else 1.5 for i in ids]


@pytest.mark.parametrize("fmt", FORMATS)
def test_timestamps_dates_and_time_zones_round_trip(postgres_url, pg_engine, sink_id, fmt):
    name = f"t_{_uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {name} (id int, tz timestamptz, ntz timestamp, "
                          f"paris timestamptz, nanos timestamptz, d date)")
    utc = dt.UTC
    tzs = [dt.datetime(2024, 2, 29, 23, 59, 59, 999999, utc), dt.datetime(1, 1, 1, tzinfo=utc),
           dt.datetime(1969, 12, 31, 23, 0, 0, 1, utc), dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=utc), None]
    ntzs = [t.replace(tzinfo=None) if t else None for t in tzs]
    dates = [dt.date(2024, 2, 29), dt.date(1, 1, 1), dt.date(1969, 12, 31), dt.date(9999, 12, 31), None]
    batch = pa.record_batch({
        "id": pa.array(range(5), pa.int32()),
        "tz": pa.array(tzs, pa.timestamp("us", "UTC")),
        "ntz": pa.array(ntzs, pa.timestamp("us")),
        "paris": pa.array(tzs, pa.timestamp("us", "Europe/Paris")),
        "nanos": pa.array([t and t.replace(year=2020) for t in tzs], pa.timestamp("ns", "UTC")),
        "d": pa.array(dates, pa.date32()),
    })
    sink = _validated(postgres_url, name, batch.schema, copy_format=fmt)
    sink.commit(_prepare(sink, _ctx(sink_id), batch))
    got = _rows(pg_engine, f"SELECT tz, ntz, paris, nanos, d FROM {name} ORDER BY id")
    assert [g[0] for g in got] == tzs
    assert [g[1] for g in got] == ntzs
    assert [g[2] for g in got] == tzs
    assert [g[3] for g in got] == [t and t.replace(year=2020) for t in tzs]
    assert [g[4] for g in got] == dates


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_kind_of_value_round_trips_exactly_across_chunks(postgres_url, pg_engine, sink_id, fmt):
    """More rows than one encoding chunk, and a batch of another size, with nulls in every
    column at different rows and the awkward values of each type: what the server holds
    is exactly what was sent (binary: fixed-width parts interleaved with text; CSV: zoned
    timestamps printed as UTC)."""
    name = f"t_{_uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {name} (id bigint, i integer, s text, d double precision, "
                          f"ts timestamptz, ntz timestamp, b boolean, j jsonb)")
    n = 70_003  # sinks.postgres._binary.CHUNK_ROWS is 65,536
    texts = ["", "é ☃ 𝄞", 'q"x', "a,b", "line\nnext", "\\.", "\\N", "NULL", " ", "\r\n", "\t", '""']
    floats = [float("nan"), float("inf"), -float("inf"), -0.0, 1e-310, -1.5, 2.0**53, 0.1]
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    ids = list(range(n))
    ints = [None if k % 11 == 3 else (-1) ** k * k * 30_000 for k in ids]
    strs = [None if k % 13 == 5 else texts[k % len(texts)] + str(k) for k in ids]
    dbls = [None if k % 7 == 2 else floats[k % len(floats)] if k % 3 else -k / 3 for k in ids]
    tss = [None if k % 17 == 0 else start - dt.timedelta(days=3 * k, microseconds=k * 37) for k in ids]
    ntzs = [None if k % 19 == 1 or t is None else t.replace(tzinfo=None) for k, t in zip(ids, tss, strict=True)]
    bools = [None if k % 23 == 4 else k % 2 == 0 for k in ids]
    jsons = [None if k % 29 == 6 else json.dumps({"k": -k, "t": texts[k % len(texts)]}) for k in ids]
    table = pa.table({
        "id": pa.array(ids, pa.int64()), "i": pa.array(ints, pa.int64()), "s": pa.array(strs, pa.string()),
        "d": pa.array(dbls, pa.float64()), "ts": pa.array(tss, pa.timestamp("us", "Europe/Paris")),
        "ntz": pa.array(ntzs, pa.timestamp("us")), "b": pa.array(bools, pa.bool_()), "j": pa.array(jsons, pa.string()),
    })
    batches = [table.slice(0, n - 3).combine_chunks().to_batches()[0], table.slice(n - 3).to_batches()[0]]
    sink = _validated(postgres_url, name, table.schema, copy_format=fmt)
    assert sink.commit(_prepare(sink, _ctx(sink_id), *batches)) is CommitOutcome.COMMITTED
    got = _rows(pg_engine, f"SELECT id, i, s, d, ts, ntz, b, j FROM {name} ORDER BY id")
    assert [g[0] for g in got] == ids
    assert [g[1] for g in got] == ints
    assert [g[2] for g in got] == strs
    assert [repr(g[3]) for g in got] == [repr(v) for v in dbls]  # repr: NaN != NaN, -0.0 == 0.0
    assert [g[4] for g in got] == tss
    assert [g[5] for g in got] == ntzs
    assert [g[6] for g in got] == bools
    assert [g[7] for g in got] == [None if v is None else json.loads(v) for v in jsons]


def test_binary_and_csv_load_every_supported_type_identically(postgres_url, pg_engine, sink_id):
    cols = ("a smallint, b integer, c bigint, d real, e double precision, f boolean, g text, "
            "h varchar(20), i char(3), j json, k jsonb, l bytea, m numeric, n numeric(12,3), o uuid, "
            "p double precision, q date")
    batch = pa.record_batch({
        "a": pa.array([1, -32768, None], pa.int16()),
        "b": pa.array([2**31 - 1, None, 0], pa.int64()),
        "c": pa.array([-(2**63), 2**63 - 1, None], pa.int64()),
        "d": pa.array([1.5, float("inf"), None], pa.float32()),
        "e": pa.array([float("nan"), -0.0, 1e-310], pa.float64()),
        "f": pa.array([True, False, None]),
        "g": pa.array(["", None, "x\\y"], pa.large_string()),
        "h": pa.array(["δ", "", None]),
        "i": pa.array(["ab", None, "abc"]),
        "j": pa.array(['{"a": [1, 2]}', None, "null"]),
        "k": pa.array(['{"b": 1, "a": "é"}', "[]", None]),
        "l": pa.array([b"\x00\xff\\x", b"", None], pa.binary()),
        "m": pa.array([1, None, -5], pa.int32()),
        "n": pa.array([decimal.Decimal("-12.345"), None, decimal.Decimal("0.000")], pa.decimal128(12, 3)),
        "o": pa.array(["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", None, "00000000-0000-0000-0000-000000000000"]),
        "p": pa.array([1, None, 2**53], pa.int64()),
        "q": pa.array([dt.date(2000, 1, 1), None, dt.date(1999, 12, 31)], pa.date64()),
    })
    results: list[list[tuple[Any, ...]]] = []
    for fmt in ("auto", "csv"):
        name = f"t_{_uid()}"
        with pg_engine.begin() as c:
            c.exec_driver_sql(f"CREATE TABLE {name} (rid serial, {cols})")
        sink = _validated(postgres_url, name, batch.schema, copy_format=fmt)
        sink.commit(_prepare(sink, _ctx(sink_id, partition=len(results)), batch))
        results.append(_rows(pg_engine, f"SELECT a,b,c,d,e,f,g,h,i,j::text,k,l,m,n,o,p,q FROM {name} ORDER BY rid"))
    # numeric and uuid force CSV under "auto": check binary on the binary-capable subset too
    subset = batch.select([c for c in batch.schema.names if c not in ("m", "n", "o")])
    name = f"t_{_uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {name} (rid serial, {cols})")
    sink = _validated(postgres_url, name, subset.schema, copy_format="binary")
    sink.commit(_prepare(sink, _ctx(sink_id, partition=9), subset))
    binary = _rows(pg_engine, f"SELECT a,b,c,d,e,f,g,h,i,j::text,k,l,NULL::int,NULL::numeric,NULL::uuid,p,q "
                              f"FROM {name} ORDER BY rid")
    strip = [tuple(v for i, v in enumerate(r) if i not in (12, 13, 14)) for r in results[1]]
    assert repr([tuple(v for i, v in enumerate(r) if i not in (12, 13, 14)) for r in binary]) == repr(strip)
    assert repr(results[0]) == repr(results[1])  # repr: NaN != NaN
    first = results[1][0]
    assert first[:3] == (1, 2**31 - 1, -(2**63)) and first[10] == {"a": "é", "b": 1}
    assert bytes(first[11]) == b"\x00\xff\\x" and first[13] == decimal.Decimal("-12.345")
    assert str(first[14]) == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11" and results[1][2][15] == float(2**53)


def test_invoke_rows_are_written_with_their_types(postgres_url, pg_engine, sink_id):
    name = f"t_{_uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {name} (id bigint, s text, ts timestamptz, n numeric, b bytea, "
                          f"ok boolean DEFAULT true)")
    sink = _validated(postgres_url, name, pa.schema([("id", pa.int64())]))
    txn = sink.begin_transaction(_ctx(sink_id))
    ts = dt.datetime(2024, 1, 2, 3, 4, 5, 6, dt.UTC)
    for i in range(2500):  # crosses the row buffer size
        sink.invoke(txn, {"id": i, "s": "" if i == 0 else None if i == 1 else f"r{i}", "ts": ts,
                          "n": decimal.Decimal("1.10"), "b": b"\x00\x01"})
    sink.invoke(txn, {"ID": 9999, "ok": False})  # another key set, matched case-insensitively
    h = sink.pre_commit(txn)
    assert h.rows == 2501
    sink.commit(h)
    assert _rows(pg_engine, f"SELECT count(*), count(s), min(ts), sum(n) FROM {name} WHERE id < 2500") == [
        (2500, 2499, ts, decimal.Decimal("2750.00"))]
    assert _rows(pg_engine, f"SELECT s, s IS NULL FROM {name} WHERE id IN (0, 1) ORDER BY id") == [
        ("", False), (None, True)]
    assert _rows(pg_engine, f"SELECT ok, b FROM {name} WHERE id = 9999") == [(False, None)]
    txn = sink.begin_transaction(_ctx(sink_id, partition=1))
    with pytest.raises(SchemaMismatchError):
        sink.invoke(txn, {"nope": 1})
        sink.pre_commit(txn)
    sink.rollback(txn)


_text = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=40)


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.one_of(st.none(), _text, st.sampled_from(["", "\\.", "\n\\.\n", '"', ",", "\\N"])),
                       min_size=1, max_size=30))
def test_any_text_round_trips_in_both_formats(postgres_url, pg_engine, values):
    name = f"t_{_uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {name} (id bigint PRIMARY KEY, s text, x double precision)")
    try:
        for part, fmt in enumerate(FORMATS):
            sink = PostgresSink(postgres_url, name, copy_format=fmt)
            ids = [part * 1000 + i for i in range(len(values))]
            sink.commit(_prepare(sink, _ctx("s_hyp", partition=part), _batch(ids, s=values)))
            got = [r[0] for r in _rows(pg_engine, f"SELECT s FROM {name} WHERE id / 1000 = {part} ORDER BY id")]
            assert got == values, fmt
    finally:
        with pg_engine.begin() as c:
            c.exec_driver_sql(f"DROP TABLE {name}")


def test_twopc_postgres_honours_isolation_level_session_init_and_query_timeout(postgres_url, pg_engine, table,
                                                                              sink_id):
    """isolationLevel, sessionInitStatement and queryTimeout given as Spark options mean the
    same in twopc-postgres as in twopc-jdbc (one options reader)."""
    log_table = f"log_{_uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {log_table} (iso text, stmt_timeout text, lock_timeout text)")
    try:
        sink = PostgresSink.from_options({
            "url": postgres_url, "dbtable": table, "isolationLevel": "SERIALIZABLE", "queryTimeout": "42",
            "lockTimeout": "1.5s",
            "sessionInitStatement": f"INSERT INTO {log_table} SELECT current_setting('transaction_isolation'), "
                                    f"current_setting('statement_timeout'), current_setting('lock_timeout')"})
        sink.validate(_batch([0]).schema)
        assert sink.commit(_prepare(sink, _ctx(sink_id), _batch([1]))) is CommitOutcome.COMMITTED
        # the init statement ran inside the prepared transaction, with the session's settings
        assert _rows(pg_engine, f"SELECT * FROM {log_table}") == [("serializable", "42s", "1500ms")]
    finally:
        with pg_engine.begin() as c:
            c.exec_driver_sql(f"DROP TABLE {log_table}")


def _validated(url: str, table: str, schema: pa.Schema | None = None, **kw: Any) -> PostgresSink:
    return validated(PostgresSink, url, table, schema, **kw)
