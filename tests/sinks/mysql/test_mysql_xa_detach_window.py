"""The window in which MariaDB's ``XA COMMIT`` answers OK and commits nothing.

MariaDB ends a session in two steps (``unlink_thd``): ``THD::cleanup`` hands the prepared xid
over to the server's xid cache (other sessions can now ``XA COMMIT`` it) and the session
leaves ``PROCESSLIST``; then ``THD::free_connection`` makes InnoDB detach the transaction
from the session. An ``XA COMMIT`` from another session in between finds the xid, asks
InnoDB, which does not find a detached transaction, ignores that answer, says OK and forgets
the xid: the transaction stays prepared inside InnoDB, holding its locks, invisible to
``XA RECOVER`` until the server restarts. (tests/sinks/mysql/test_mysql_xa_sink.py once failed so:
``commit()`` said COMMITTED, the table was empty, the teardown waited on a lock.)

gdb holds the ending session's thread at ``THD::free_connection``, which stands the test
exactly in that window. The server is this module's own (it is restarted at the end).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
import sqlalchemy as sa

from twopc import CommitOutcome, SinkError
from twopc.faultinject import LocalMariaDB
from twopc.sinks import MySqlXaSink
from twopc.sinks.sql import dispose_engines

from tests._gdb import ThreadHold
from tests._sql_helpers import batch, ctx, uid, validated

_PLAIN_PASSWORD = "plain-" + uid()


@pytest.fixture(scope="module")
def server() -> Iterator[LocalMariaDB]:
    srv = LocalMariaDB()
    srv.start()
    try:
        _sql(srv.admin_url, "CREATE USER plain@'%%' IDENTIFIED BY %s", (_PLAIN_PASSWORD,))
        _sql(srv.admin_url, "GRANT ALL PRIVILEGES ON twopc.* TO plain@'%'")  # no PROCESS
        yield srv
    finally:
        gc.collect()  # finalize the sinks' pools while the server is up (see test_mysql_xa_sink.py)
        dispose_engines()
        srv.stop()


def _sql(url: str, query: str, params: tuple[Any, ...] | None = None) -> list[tuple[Any, ...]]:
    u = sa.make_url(url)
    conn = pymysql.connect(host=u.host, port=u.port or 3306, user=u.username, password=u.password or "",
                           database=u.database, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(query, params)
            return [tuple(r) for r in cur.fetchall()]
    finally:
        conn.close()


def _plain_url(server: LocalMariaDB) -> str:
    return sa.make_url(server.url).set(username="plain", password=_PLAIN_PASSWORD).render_as_string(
        hide_password=False)


def _table(server: LocalMariaDB) -> str:
    name = f"t_{uid()}"
    _sql(server.admin_url, f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, s TEXT, x DOUBLE) ENGINE=InnoDB")
    return name


def _begin(sink: MySqlXaSink, sink_id: str) -> Any:
    txn = sink.begin_transaction(ctx(sink_id))
    sink.invoke_batch(txn, batch([1, 2, 3]))
    return txn


def test_a_commit_in_the_window_is_never_reported_committed(server: LocalMariaDB) -> None:
    """Without PROCESS twopc cannot see InnoDB detach: a commit that lands in the window is
    an error that says what happened and what to do, never COMMITTED; after a restart the
    transaction is listed again and commits."""
    table, sink_id = _table(server), f"s_{uid()}"
    sink = validated(MySqlXaSink, _plain_url(server), table)
    txn = _begin(sink, sink_id)
    assert server.pid is not None
    with ThreadHold(server.pid, "THD::free_connection") as hold:
        hold.arm()
        handle = sink.pre_commit(txn)  # closes the write session: its thread stops in the window
        hold.wait_hit()
        with pytest.raises(SinkError, match=r"acknowledged XA COMMIT of \S+ on \S+ but did not commit it") as err:
            sink.commit(handle)
        assert "Restart the server" in str(err.value) and "PROCESS" in str(err.value)
        assert _sql(server.admin_url, f"SELECT COUNT(*) FROM {table}") == [(0,)]
    # the server forgot the xid but InnoDB did not: it is back after a restart, and commits
    server.restart()
    dispose_engines()
    assert sink.commit(handle) is CommitOutcome.COMMITTED
    assert _sql(server.admin_url, f"SELECT id FROM {table} ORDER BY id") == [(1,), (2,), (3,)]
    sink.close()


def test_pre_commit_waits_until_innodb_has_detached_the_transaction(server: LocalMariaDB) -> None:
    """With PROCESS, pre_commit returns only once InnoDB has detached the transaction, so the
    handle it returns is safe to commit at once."""
    table, sink_id = _table(server), f"s_{uid()}"
    sink = validated(MySqlXaSink, server.admin_url, table)
    txn = _begin(sink, sink_id)
    out: list[Any] = []
    assert server.pid is not None
    with ThreadHold(server.pid, "THD::free_connection") as hold:
        hold.arm()
        worker = threading.Thread(target=lambda: out.append(sink.pre_commit(txn)), daemon=True)
        worker.start()
        hold.wait_hit()
        worker.join(1.0)
        held = worker.is_alive()  # still waiting for InnoDB while the session's thread is held
        hold.release()
        worker.join(30)
    assert held, "pre_commit returned while InnoDB still had the transaction attached to its session"
    assert sink.commit(out[0]) is CommitOutcome.COMMITTED
    assert _sql(server.admin_url, f"SELECT id FROM {table} ORDER BY id") == [(1,), (2,), (3,)]
    sink.close()
