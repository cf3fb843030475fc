"""MySqlXaSink.commit_all against a real MariaDB: a batch's ``XA COMMIT`` statements go in one
query, and every id ends exactly as one-by-one commits end it (committed, already committed,
unknown, still attached to a live session)."""

from __future__ import annotations

import gc
import uuid
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from twopc import CommitOutcome, SinkError
from twopc.sinks import MySqlXaHandle, MySqlXaSink
from twopc.sinks.mysql import _prepared as _mysql_xa
from twopc.sinks.sql import dispose_engines

from tests._sql_helpers import batch, ctx, prepare, uid, validated


@pytest.fixture(autouse=True)
def _release_connections() -> Iterator[None]:
    yield
    gc.collect()
    dispose_engines()


def _connect(url: str) -> pymysql.connections.Connection[Any]:
    import sqlalchemy as sa

    u = sa.make_url(url)
    return pymysql.connect(host=u.host, port=u.port or 3306, user=u.username, password=u.password or "",
                           database=u.database, autocommit=True, charset="utf8mb4")


def _sql(url: str, query: str, params: tuple[Any, ...] | None = None) -> list[tuple[Any, ...]]:
    conn = _connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(query, params)
            return [tuple(r) for r in cur.fetchall()]
    finally:
        conn.close()


@pytest.fixture
def target(mariadb_url: str) -> Iterator[tuple[str, str]]:
    """(fresh InnoDB table (id bigint primary key, s text, x double), fresh sink id); prepared
    XA transactions the test left are rolled back."""
    table, sink_id = f"t_{uid()}", f"s_{uid()}"
    _sql(mariadb_url, f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, s TEXT, x DOUBLE) ENGINE=InnoDB")
    yield table, sink_id
    for _fmt, glen, _blen, data in _sql(mariadb_url, "XA RECOVER"):
        gid = bytes(data[:glen]).decode("ascii", "replace")
        if gid.startswith(f"twopc:{sink_id}:"):
            _sql(mariadb_url, "XA ROLLBACK %s", (gid,))
    _sql(mariadb_url, f"DROP TABLE IF EXISTS {table}")


@pytest.fixture
def xa_queries(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every query text this process sends that carries an ``XA COMMIT`` (the driver's own
    send, called through)."""
    sent: list[bytes] = []
    real = pymysql.connections.Connection._execute_command  # type: ignore[attr-defined]  # private, untyped

    def spy(self: Any, command: int, sql: Any) -> Any:
        text = sql.encode() if isinstance(sql, str) else bytes(sql)
        if b"XA COMMIT" in text:
            sent.append(text)
        return real(self, command, sql)

    monkeypatch.setattr(pymysql.connections.Connection, "_execute_command", spy)
    return sent


def _ids(url: str, table: str) -> list[int]:
    return [int(r[0]) for r in _sql(url, f"SELECT id FROM {table} ORDER BY id")]


def test_a_batch_of_prepared_transactions_is_committed_in_one_query(mariadb_url, target, xa_queries):
    table, sink_id = target
    sink = validated(MySqlXaSink, mariadb_url, table)
    handles = [prepare(sink, ctx(sink_id, batch=1, partition=p), batch([p])) for p in range(6)]
    assert sink.commit_all(handles) == [CommitOutcome.COMMITTED] * 6
    assert len(xa_queries) == 1, xa_queries
    assert _ids(mariadb_url, table) == list(range(6))
    assert sink.list_prepared(sink_id) == []
    # the control connection went back to single statements
    with pytest.raises(pymysql.err.ProgrammingError, match="near 'SELECT 2'"):
        sink.target.control_execute("SELECT 1; SELECT 2")
    sink.close()


def test_batched_outcomes_match_one_by_one_for_committed_unknown_and_fresh_ids(mariadb_url, target, xa_queries):
    table, sink_id = target
    sink = validated(MySqlXaSink, mariadb_url, table)
    h = [prepare(sink, ctx(sink_id, batch=2, partition=p), batch([10 + p])) for p in range(4)]
    assert sink.commit(h[0]) is CommitOutcome.COMMITTED  # committed before: XAER_NOTA, marker row exists
    unknown = MySqlXaHandle(f"twopc:{sink_id}:2:9:1:{uuid.uuid4().hex[:8]}", sink_id, 2, 9, 1, table=table)
    order = [h[1], h[0], h[2], unknown, h[3]]
    expected = [CommitOutcome.COMMITTED, CommitOutcome.ALREADY_COMMITTED, CommitOutcome.COMMITTED,
                CommitOutcome.LOST, CommitOutcome.COMMITTED]
    xa_queries.clear()
    assert sink.commit_all(order) == expected
    assert len(xa_queries) == 3  # each unknown id ends one query; the statements after it go in the next
    assert _ids(mariadb_url, table) == [10, 11, 12, 13]
    # one by one says the same about every id now (all finished)
    assert sink.commit_all(order) == [CommitOutcome.ALREADY_COMMITTED, CommitOutcome.ALREADY_COMMITTED,
                                      CommitOutcome.ALREADY_COMMITTED, CommitOutcome.LOST,
                                      CommitOutcome.ALREADY_COMMITTED]
    assert [sink.commit(x) for x in order] == [CommitOutcome.ALREADY_COMMITTED] * 3 + [
        CommitOutcome.LOST, CommitOutcome.ALREADY_COMMITTED]
    sink.close()


def test_an_id_attached_to_a_live_session_fails_the_batch_after_the_ids_before_it(mariadb_url, target, monkeypatch):
    table, sink_id = target
    sink = validated(MySqlXaSink, mariadb_url, table)
    first = prepare(sink, ctx(sink_id, batch=3, partition=0), batch([20]))
    gid = f"twopc:{sink_id}:3:1:1:{uuid.uuid4().hex[:8]}"
    live = _connect(mariadb_url)
    with live.cursor() as cur:
        cur.execute("XA START %s", (gid,))
        cur.execute(f"INSERT INTO {table} (id) VALUES (21)")
        cur.execute("INSERT INTO twopc_markers (gid, sink_id, batch_id, partition_id, `rows`) "
                    "VALUES (%s, %s, 3, 1, 1)", (gid, sink_id))
        cur.execute("XA END %s", (gid,))
        cur.execute("XA PREPARE %s", (gid,))
    attached = MySqlXaHandle(gid, sink_id, 3, 1, 1, table=table)
    last = prepare(sink, ctx(sink_id, batch=3, partition=2), batch([22]))
    monkeypatch.setattr(_mysql_xa, "_DETACH_WAIT_S", 0.3)
    with pytest.raises(SinkError, match="attached to a live session"):
        sink.commit_all([first, attached, last])
    assert _ids(mariadb_url, table) == [20]  # the id before it committed, the one after untouched
    live.close()
    monkeypatch.setattr(_mysql_xa, "_DETACH_WAIT_S", 10.0)
    assert sink.commit_all([first, attached, last]) == [CommitOutcome.ALREADY_COMMITTED, CommitOutcome.COMMITTED,
                                                        CommitOutcome.COMMITTED]
    assert _ids(mariadb_url, table) == [20, 21, 22]
    sink.close()
