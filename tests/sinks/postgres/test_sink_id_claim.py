"""A coordinator's claim on its sink id's lease (``twopc._sink_id_claim``), let go by a garbage
collection on a thread that holds the claims' lock.

``claim_writer`` holds the process's claim lock while it takes a lease from the server; a log
line's allocation there can start a garbage collection, which runs the finalizer of a
coordinator nobody references any more. That finalizer releases the coordinator's claim: it
must neither wait for the lock its own thread holds (the suite once hung there, in
``tests/chaos/test_lost_reply.py``) nor lose the release.
"""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import sqlalchemy as sa

from twopc import CommitCoordinator, CommitLedger, _sink_id_claim
from twopc.sinks import PostgresSink

from tests._sql_helpers import batch, uid


def test_a_coordinator_collected_inside_the_claim_lock_lets_its_lease_go(postgres_url: str, pg_engine: sa.Engine,
                                                                        tmp_path: Path) -> None:
    table, sink_id = f"claim_{uid()}", f"claimed-{uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint PRIMARY KEY, s text, x double precision)")
    sink = PostgresSink(postgres_url, table)
    sink.validate(batch([0]).schema)
    released = threading.Event()

    def collect_while_holding_the_lock() -> None:
        coordinator = CommitCoordinator(sink, CommitLedger(str(tmp_path / "first")), sink_id)
        with _sink_id_claim._holding():  # as claim_writer holds it while it takes a lease
            del coordinator
            gc.collect()  # the coordinator's finalizer runs here, on this thread
        released.set()

    worker = threading.Thread(target=collect_while_holding_the_lock, daemon=True)
    worker.start()
    worker.join(60)
    assert released.is_set(), "the collected coordinator's release waited for the lock its own thread held"
    # the lease went with it: a writer of another checkpoint takes the same sink id
    with CommitCoordinator(sink, CommitLedger(str(tmp_path / "second")), sink_id):
        pass
    sink.close()
