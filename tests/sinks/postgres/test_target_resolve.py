"""What a write without a checkpoint does to the other writers recorded in the target's
``twopc_ledger`` (:func:`twopc.spi.lease.resolve_abandoned`) when they have nothing left to finish.

A ``txnAppId`` writer's records stay in the table after its write on purpose (its last
committed ``txnVersion`` makes a rerun write nothing), so every later write to the server, and
``twopc recover``, finds it there with its lease free; one whose decided batch was lost is marked
done by the command its error names. JVM-less, against the real PostgreSQL."""

from __future__ import annotations

import re
import shlex
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pyarrow as pa
import pytest
import sqlalchemy as sa

from twopc import CommitCoordinator
from twopc._target import open_target_ledger, settle_own
from twopc.recovery._cli import ERROR, OK, main
from twopc.sinks import PostgresSink
from twopc.spi.lease import resolve_abandoned
from twopc.spi.operations import BatchState

from tests._filesink_helpers import crash_commit
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


def test_a_lost_batch_of_a_write_without_a_checkpoint_is_accepted_by_the_command_its_error_names(
        postgres_url: str, pg_engine: sa.Engine, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A write without a checkpoint whose decided transaction was rolled back by hand: every
    ``twopc recover`` of the server says so, naming the command that marks the batch done; that
    command, its placeholders filled in, runs as pasted, and the next recover is clean."""
    table = f"tr_{uuid.uuid4().hex[:10]}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL, payload text)")
    sink = PostgresSink(postgres_url, table)
    sink.validate(pa.schema([("id", pa.int64()), ("payload", pa.string())]))
    backend = sink.target_ledger()
    sink_id = f"nightly-{uuid.uuid4().hex[:8]}"
    lease, epoch, handle = leased_writer(sink, backend, sink_id, 7, {"id": 1, "payload": "x"})
    crash_commit(CommitCoordinator(sink, open_target_ledger(backend, sink_id, lease=lease, epoch=epoch), sink_id),
                 "after_decision", 7, [handle], tmp_path)
    sink.abort(handle)  # ROLLBACK PREPARED by hand: the decided batch's row is gone
    settle_own(sink, backend, sink_id, lease)  # the driver is gone: its lease is free
    deadline = time.monotonic() + 30
    while backend.holds(lease) and time.monotonic() < deadline:
        time.sleep(0.05)
    target = ["--format", "twopc-postgres", "--option", f"url={postgres_url}", "--option", f"dbtable={table}"]

    assert main(["recover", *target]) == ERROR
    error = capsys.readouterr().err
    [suggested] = re.findall(r"`(twopc recover [^`]+)`", error)
    assert str(sa.make_url(postgres_url).password) not in error
    command = (suggested.replace("<format>", "twopc-postgres").replace("<url>", postgres_url)
               .replace("<dbtable>", table))
    assert main(shlex.split(command)[1:]) == OK, capsys.readouterr().err
    assert open_target_ledger(backend, sink_id).state(7) is BatchState.COMMITTED
    assert main(["recover", *target]) == OK, capsys.readouterr().err
    sink.close()
