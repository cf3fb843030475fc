"""A commit whose reply never comes (faultinject.FaultProxy forwards COMMIT PREPARED /
XA COMMIT / the Redis FUNCTION commit and swallows the answer) returns or fails within the
configured bound, and nothing is lost or doubled: one lost reply is answered by a retry
(``ALREADY_COMMITTED``); when every reply is lost the commit fails with
:class:`CommitPendingError`, the batch stays decided, and once the network heals the next
start (plan-time recovery) finishes it, each id exactly once.

The hang guard (``_finishes``) only detects a commit that never returns; it asserts no
speed."""

from __future__ import annotations

import socket
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import redis
import sqlalchemy as sa

from twopc import CommitCoordinator, CommitLedger, RecoveryCoordinator, TransactionContext, TwoPhaseCommitSink
from twopc.faultinject import FaultProxy
from twopc.sinks import MySqlXaSink, PostgresSink
from twopc.sinks.redis import HSetOp, RedisSink
from twopc.sinks.redis import _lua as lua
from twopc.sinks.sql._timeouts import reply_deadline
from twopc.spi import CommitPendingError
from twopc.spi.operations import BatchState
from twopc.spi.runtime import CommitRetry

from tests._sql_helpers import batch, ctx, fresh_sql_target, prepare, uid

AnySink = TwoPhaseCommitSink[Any, Any, Any]
HANG = 180.0  # far above any configured bound: only a commit that never returns reaches it
RETRY = CommitRetry(retries=1, backoff=0.1)


def _finishes(fn: Callable[[], object]) -> object:
    """Run *fn*; its result or the exception it raised. Fails if it has not returned
    after :data:`HANG` seconds (a hung commit)."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())
        except Exception as exc:  # noqa: BLE001 - the caller inspects whatever was raised
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(HANG)
    assert not t.is_alive(), "the commit hung: its reply was lost and nothing bounded the wait"
    return out[0]


def _proxied_sql_url(url: str, proxy: FaultProxy) -> str:
    return sa.make_url(url).set(host=proxy.listen_host, port=proxy.port).render_as_string(hide_password=False)


def _lost_reply_scenario(sink: AnySink, fresh_sink: Callable[[], AnySink], proxy: FaultProxy, pattern: bytes,
                         prepare_batch: Callable[[AnySink, str, int], list[Any]], ids: Callable[[], list[int]],
                         tmp_path: Path, sink_id: str, where: str, secret: str | None = None) -> None:
    """Batch 1: one reply lost (the retry answers). Batch 2: every reply lost (the commit
    fails, the next start finishes it). Each id exactly once at the end."""
    ledger = CommitLedger(str(tmp_path / "ckpt"))
    coordinator = CommitCoordinator(sink, ledger, sink_id, retry=RETRY)

    handles = prepare_batch(sink, sink_id, 1)
    proxy.swallow_reply(pattern, times=1)
    result = _finishes(lambda: coordinator.commit_batch(1, handles))
    assert not isinstance(result, BaseException), result
    assert proxy.swallowed == 1
    # asked again: by the coordinator (twopc_commits_total{outcome="retried"}) or by the sink's
    # control connection replacing the dead one (then the answer is ALREADY_COMMITTED)
    first_retries = coordinator.metrics.retried
    assert first_retries + coordinator.metrics.already_committed >= 1
    assert ledger.state(1) is BatchState.COMMITTED
    assert ids() == [1, 2, 3]

    handles = prepare_batch(sink, sink_id, 2)
    proxy.swallow_reply(pattern, times=None)
    err = _finishes(lambda: coordinator.commit_batch(2, handles))
    assert isinstance(err, CommitPendingError), err
    text = str(err)
    assert f"batch 2 of sink {sink_id!r} is decided" in text
    assert where in text and "twopc recover" in text and "next start of the query" in text
    assert secret is None or secret not in text
    assert ledger.state(2) is BatchState.DECIDED
    assert proxy.swallowed >= 2
    assert coordinator.metrics.retried == first_retries + RETRY.retries

    proxy.heal()
    sink.close()
    recovered = fresh_sink()
    report = _finishes(lambda: RecoveryCoordinator(recovered, ledger, sink_id=sink_id).run())
    assert not isinstance(report, BaseException), report
    assert ledger.state(2) is BatchState.COMMITTED
    assert ids() == [1, 2, 3, 11, 12, 13]
    assert recovered.list_prepared(sink_id) == []
    recovered.close()


def _sql_prepare(sink: AnySink, sink_id: str, batch_id: int) -> list[Any]:
    base = 0 if batch_id == 1 else 10
    return [prepare(sink, ctx(sink_id, batch=batch_id, partition=0), batch([base + 1, base + 2])),
            prepare(sink, ctx(sink_id, batch=batch_id, partition=1), batch([base + 3]))]


@pytest.fixture
def sql_target(request: pytest.FixtureRequest) -> Iterator[tuple[str, type[Any], str, str]]:
    """(url, sink class, fresh table (id bigint primary key, s text, x double), fresh sink id)
    on the parametrized server; prepared transactions a failed test left are rolled back."""
    with fresh_sql_target(request) as target:
        yield target


@pytest.mark.parametrize(("sql_target", "pattern"),
                         [(("postgres_url", PostgresSink), b"COMMIT PREPARED"),
                          (("mariadb_url", MySqlXaSink), b"XA COMMIT")],
                         indirect=["sql_target"], ids=["postgres", "mariadb"])
def test_a_lost_sql_commit_reply_is_bounded_and_finished_once(sql_target: tuple[str, type[Any], str, str],
                                                               pattern: bytes, tmp_path: Path) -> None:
    url, sink_class, table, sink_id = sql_target
    u = sa.make_url(url)
    engine = sa.create_engine(url)

    def ids() -> list[int]:
        with engine.connect() as c:
            return [r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table} ORDER BY id")]

    try:
        with FaultProxy(u.host or "127.0.0.1", u.port or 0) as proxy:
            proxied = _proxied_sql_url(url, proxy)

            def make() -> AnySink:
                s = sink_class(proxied, table, lock_timeout="1s", socket_timeout="2s", connect_timeout="2s")
                s.validate(batch([0]).schema)
                return s

            _lost_reply_scenario(make(), make, proxy, pattern, _sql_prepare, ids, tmp_path, sink_id,
                                 where=f"{proxy.listen_host}:{proxy.port}", secret=u.password)
    finally:
        engine.dispose()


def test_a_lost_redis_commit_reply_is_bounded_and_finished_once(redis_url: str, tmp_path: Path) -> None:
    tag = "t" + uuid.uuid4().hex[:10]
    u = urllib.parse.urlsplit(redis_url)
    direct = redis.Redis.from_url(redis_url, decode_responses=True)
    key = f"{{{tag}}}:row"  # the keys HSetOp's template makes
    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])

    def ids() -> list[int]:
        return sorted(int(str(k).rsplit(":", 1)[1]) for k in direct.keys(f"{key}:*"))

    def prepare_batch(sink: AnySink, sink_id: str, batch_id: int) -> list[Any]:
        base = 0 if batch_id == 1 else 10
        out = []
        for part, rows in enumerate(([base + 1, base + 2], [base + 3])):
            txn = sink.begin_transaction(TransactionContext(sink_id, batch_id, part, 1))
            sink.invoke_batch(txn, pa.record_batch({"id": pa.array(rows, pa.int64()),
                                                    "s": pa.array([f"v{i}" for i in rows])}, schema=schema))
            out.append(sink.pre_commit(txn))
        return out

    with FaultProxy(u.hostname or "127.0.0.1", u.port or 6379) as proxy:
        proxied = urllib.parse.urlunsplit((u.scheme, f"{proxy.listen_host}:{proxy.port}", u.path, u.query, ""))

        def make() -> AnySink:
            s = RedisSink(proxied, [HSetOp("{{" + tag + "}}:row:{id}", columns=("s",))], hash_tag=tag,
                          socket_timeout=0.5, connect_timeout=2)
            s.validate(schema)
            return s

        _lost_reply_scenario(make(), make, proxy, lua.function_name("commit_batch").encode(), prepare_batch, ids,
                             tmp_path, f"s{uid()}", where=f"{proxy.listen_host}:{proxy.port}")
    direct.close()


def test_reply_deadline_cuts_only_a_wait_that_outlasts_it() -> None:
    """The PostgreSQL statement deadline on a real socket pair: blocks that end in time are
    never cut (thousands of them, so the watchdog's bookkeeping is exercised), a read that
    waits past it sees the connection end."""
    a, b = socket.socketpair()
    with a, b:
        for _ in range(3000):
            with reply_deadline(a.fileno, 60) as d:
                pass
            assert not d.fired
        b.sendall(b"x")
        with reply_deadline(a.fileno, 60) as d:
            assert a.recv(1) == b"x"
        assert not d.fired
        with reply_deadline(a.fileno, 0.1) as d:
            assert a.recv(1) == b""  # shut down: the blocked read ends instead of waiting for ever
        assert d.fired
