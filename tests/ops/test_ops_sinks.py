"""What each built-in sink tells ``twopc status`` (prepared_details, headroom) on its real
target, and the start-up guard on PostgreSQL's max_prepared_transactions."""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from twopc import TransactionContext
from twopc.sinks import PostgresSink
from twopc.spark._observe import DEFAULT_TASK_MAX_FAILURES, check_headroom
from twopc.spi import Inspectable, TargetConfigurationError, WriteSetup, capability
from twopc.testing import SinkHarness

from tests._kit_harnesses import HARNESSES, harness_for

# What the target can tell about a prepared transaction: (age known, size known).
TELLS = {"file": (True, True), "postgres": (True, False), "mysql_xa": (False, False),
         "staging_postgres": (False, True), "staging_sqlite": (False, True), "redis": (True, True),
         "staging_mariadb": (False, True), "jdbc_prepared_postgres": (True, False),
         "jdbc_prepared_mariadb": (False, False), "http": (True, True)}


@pytest.fixture(params=HARNESSES)
def named_harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, SinkHarness]]:
    with harness_for(request.param, request, tmp_path) as h:
        yield request.param, h
    # The staging mode's table probes on MariaDB leave caught exceptions in reference cycles
    # with pymysql results, whose __del__ then runs whenever the GC gets to them. On CPython
    # 3.11.7 a finalizer run by the GC inside ast.parse (pytest rewriting a module it imports
    # later) fails it with "SystemError: AST constructor recursion depth mismatch"
    # (python/cpython#106905, fixed in 3.11.8): collect them here, at a known point.
    gc.collect()


def test_prepared_details_are_exactly_the_prepared_with_what_the_target_tells(
        named_harness: tuple[str, SinkHarness]) -> None:
    name, harness = named_harness
    sink = harness.new_sink()
    sid = f"ops{int(time.time() * 1000) % 10**9}"
    started = time.time()
    handles = []
    try:
        for p in range(2):
            txn = sink.begin_transaction(TransactionContext(sid, 4, p, 10 + p))
            sink.invoke_batch(txn, harness.rows([p * 10 + i for i in range(3)]))
            handles.append(sink.pre_commit(txn))
        details = capability(sink, Inspectable).prepared_details(sid)
        assert sorted(d.handle.txn_id for d in details) == sorted(h.txn_id for h in sink.list_prepared(sid))
        assert sorted(d.handle.txn_id for d in details) == sorted(h.txn_id for h in handles)
        assert {(d.handle.batch_id, d.handle.partition_id, d.handle.attempt_id) for d in details} == {
            (4, 0, 10), (4, 1, 11)}
        age_known, size_known = TELLS[name]
        for d in details:
            assert (d.prepared_at is not None) == age_known, (name, d)
            assert (d.size is not None) == size_known, (name, d)
            if d.prepared_at is not None:
                assert started - 5 <= d.prepared_at <= time.time() + 5, (name, d)
            if d.size is not None:
                assert d.size > 0, (name, d)
            if d.holds == "staged rows":
                assert d.size == 3
        room = capability(sink, Inspectable).headroom(sid)
        if room is not None:
            assert room.in_use >= (2 if "staging" not in name else 0), (name, room)
        assert capability(sink, WriteSetup).commit_mode()
    finally:
        for h in handles:
            sink.abort(h)
        sink.close()
    assert capability(sink, Inspectable).prepared_details(sid) == []


def test_a_max_prepared_transactions_below_the_querys_need_is_refused_with_the_fix(
        postgres_url: str, caplog: pytest.LogCaptureFixture) -> None:
    sink = PostgresSink(postgres_url, "no_table_needed")
    try:
        room = capability(sink, Inspectable).headroom("ops")
        assert room is not None and room.what == "max_prepared_transactions" and room.limit is not None
        with pytest.raises(TargetConfigurationError, match=r"max_prepared_transactions is \d+, below the "
                                                           rf"{room.limit + 1} prepared transactions"):
            check_headroom(sink, "ops", {"maxConcurrentTransactions": str(room.limit + 1)})
        check_headroom(sink, "ops", {"maxConcurrentTransactions": str(room.limit)})
        check_headroom(sink, "ops", {})  # the default need: one partition plus retries
        assert room.limit >= 1 + DEFAULT_TASK_MAX_FAILURES
        gid = f"ops-guard-{time.time_ns()}"
        with psycopg.connect(postgres_url.replace("postgresql+psycopg://", "postgresql://"),
                             autocommit=True) as other:  # another user holds a prepared transaction
            other.execute("BEGIN")
            other.execute(f"PREPARE TRANSACTION '{gid}'")
            try:
                with caplog.at_level(logging.WARNING, logger="twopc"):
                    check_headroom(sink, "ops", {"maxConcurrentTransactions": str(room.limit)})
            finally:
                other.execute(f"ROLLBACK PREPARED '{gid}'")
        assert any(getattr(r, "twopc_event", "") == "headroom_low" for r in caplog.records)
    finally:
        sink.close()
