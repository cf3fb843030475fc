"""What a write without a checkpoint does to the other writers recorded in the target's
``twopc_ledger`` (:func:`twopc.spi.resolve_abandoned`) when they have nothing left to finish.

A ``txnAppId`` writer's records stay in the table after its write on purpose (its last
committed ``txnVersion`` makes a rerun write nothing), so every later write to the server, and
``twopc recover``, finds it there with its lease free. JVM-less, against the real PostgreSQL."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pyarrow as pa
import sqlalchemy as sa

from twopc import CommitCoordinator
from twopc._target import open_target_ledger, settle_own
from twopc.sinks import PostgresSink
from twopc.spi import resolve_abandoned

from tests._sql_helpers import leased_writer


def _resolve_as_another_process(url: str, table: str) -> list[str]:
    """What the next write's planning (a new Python worker) or ``twopc recover`` does."""
    with PostgresSink(url, table) as sink:
        return resolve_abandoned(sink, sink.target_ledger())


def _records(engine: sa.Engine, sink_id: str) -> list[str]:
    with engine.connect() as c:
        return sorted(r[0] for r in c.exec_driver_sql("SELECT name FROM twopc_ledger WHERE sink_id = %s", (sink_id,)))


def test_a_finished_app_id_writer_is_resolved_without_a_record_added(postgres_url, pg_engine) -> None:
    table = f"tr_{uuid.uuid4().hex[:10]}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL, payload text)")
    sink = PostgresSink(postgres_url, table)
    sink.validate(pa.schema([("id", pa.int64()), ("payload", pa.string())]))  # creates the marker table
    backend = sink.target_ledger()
    sink_id = f"nightly-{uuid.uuid4().hex[:8]}"  # as a write with txnAppId and txnVersion 7 leaves it
    lease, epoch, handle = leased_writer(sink, backend, sink_id, 7, {"id": 1, "payload": "x"})
    CommitCoordinator(sink, open_target_ledger(backend, sink_id, lease=lease, epoch=epoch),
                      sink_id).commit_batch(7, [handle])
    settle_own(sink, backend, sink_id, lease)  # the write ends: its lease is released, its records stay
    deadline = time.monotonic() + 30
    while backend.holds(lease) and time.monotonic() < deadline:
        time.sleep(0.05)
    before = _records(pg_engine, sink_id)
    assert "committed/00000000000000000007.json" in before

    for _ in range(3):  # three later writes to the server (or twopc recover runs), each its own process
        with ProcessPoolExecutor(max_workers=1, mp_context=get_context("fork")) as pool:
            assert sink_id in pool.submit(_resolve_as_another_process, postgres_url, table).result(timeout=120)
    assert _records(pg_engine, sink_id) == before  # no owner record, no verdict added per write
    assert open_target_ledger(backend, sink_id).latest_committed() == 7  # a rerun of 7 still writes nothing
    sink.close()
