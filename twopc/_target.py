"""The decision ledger in the target, for batch writes without ``checkpointLocation``, and the
writers' leases that tell a live writer's prepared transactions from a dead one's.

A sink that prepares transactions on a server can also keep the commit ledger there
(:meth:`twopc.spi.LedgerHost.target_ledger`): the same records as a checkpoint's ledger
(:mod:`twopc._ledger`), rows of one table keyed by sink id, each written and committed in a
local transaction on the same server as the prepared transactions. A write without a
checkpoint then runs in prepared mode under a fresh sink id (``eph-...``, or its
``txnAppId``), and its decision survives its driver.

Without a checkpoint there is no single owner: two jobs may write to one server at once.
So every writer's driver holds a **lease** on the server for as long as its write runs (a
session lock keyed by its sink id, which every transaction id carries: see
:mod:`twopc._xid`), and:

- a writer takes its lease before it records anything; a lease already held means another
  live writer has this sink id: :class:`ConcurrentWriterError`, before anything is touched;
- the next write to the server (any twopc writer with a target ledger) and ``twopc
  recover`` resolve only the writers whose lease they can take themselves
  (:func:`resolve_abandoned`): free lease = writer gone. They take over its ledger
  (:meth:`CommitLedger.claim`, which fences it) and finish its decided batch or roll its
  orphans back, holding the lease while they do; a held lease is left alone, and so is a
  gone writer with nothing to finish (a ``txnAppId`` writer's records stay after its write);
- a writer that lost its lease (its lease connection died: a zombie) is refused when it
  records its decision (:class:`FencedError`): the target ledger's store checks the lease
  right before the decision row is written, and the takeover's owner epoch fences a
  decision written after the check.
"""

from __future__ import annotations

import logging
import os
import socket

from ._driver_identity import DriverIdentity, _start_ticks
from ._errors import TwoPCError
from ._ledger import CommitLedger
from ._recovery import RecoveryCoordinator
from ._runtime_options import EPHEMERAL_PREFIX
from ._sink import AnySink, purge_markers_best_effort
from ._target_protocol import Lease, TargetLedger

__all__ = ["ALL_BATCHES", "forget_writer", "open_target_ledger", "resolve_abandoned", "settle_own"]

log = logging.getLogger("twopc.target")

def _this_process() -> DriverIdentity:
    """A resolver owns a foreign writer's ledger as this process (never as the driver JVM,
    which may be the dead writer's own when only its lease holder died)."""
    pid = os.getpid()
    return DriverIdentity(host=socket.gethostname(), pid=pid, started=_start_ticks(pid) or 0)


def open_target_ledger(backend: TargetLedger, sink_id: str, *, lease: Lease | None = None,
                       epoch: int | None = None) -> CommitLedger:
    """The commit ledger of *sink_id* kept in the target."""
    return CommitLedger(f"{backend.location} sink {sink_id}", store=backend.store(sink_id, lease), epoch=epoch)


def resolve_abandoned(sink: AnySink, backend: TargetLedger, *, skip: str | None = None) -> list[str]:
    """Finish the decided batches and roll back the orphans of every writer in the target
    ledger whose lease is free (its driver is gone), except *skip*; forget the records of a
    resolved ``eph-`` writer. A gone writer with nothing decided-and-unfinished and nothing
    prepared is not claimed: its records are left exactly as they are. Returns the sink ids
    resolved (those whose lease was free).

    Raises:
        SinkError / LedgerError: the target failed (what was resolved stays resolved).
    """
    done = []
    for writer in backend.writers():
        if writer == skip:
            continue
        with backend.take(writer) as free:
            if not free:
                log.info("twopc: the writer with sink id %s on %s is alive (it holds its lease): its "
                         "transactions are left alone", writer, backend.location)
                continue
            ledger = open_target_ledger(backend, writer)
            if ledger.pending() or sink.list_prepared(writer):
                ledger.claim(_this_process())  # fences it, should it come back
                report = RecoveryCoordinator(sink, ledger, sink_id=writer, claimed=True).run()  # holds its lease
                if report.changed_anything:
                    log.warning("twopc: resolved the abandoned write %s on %s: %s", writer, backend.location,
                                report.summary())
            # else nothing to finish: no claim, whose owner record and verdict would otherwise be added to a
            # finished txnAppId writer's permanent records by every write to the server. A zombie of it
            # cannot decide unfenced: its decision is refused by the lease check (its lease is gone), and
            # one written after that check names transactions prepared before it, which we would list.
            if writer.startswith(EPHEMERAL_PREFIX) and not ledger.pending() and not sink.list_prepared(writer):
                forget_writer(sink, backend, writer)
            done.append(writer)
    return done


#: above every batch id: :func:`forget_writer` purges all of a writer's markers
ALL_BATCHES = 2**63 - 1


def forget_writer(sink: AnySink, backend: TargetLedger, sink_id: str) -> None:
    """Delete the sink's markers of the ``eph-`` writer *sink_id*, then its records. Only for
    a writer with nothing decided-and-unfinished and nothing prepared: no recovery will ask
    about its transactions again (its id is never reused), so its markers would only grow
    the marker table. The markers go first: should forgetting fail, the records still name
    the writer, and the next write finds it again.

    Raises:
        TwoPCError: the target failed (a failed purge of the markers is only logged,
            :func:`~twopc._sink.purge_markers_best_effort`: its markers are then left).
    """
    purge_markers_best_effort(sink, sink_id, ALL_BATCHES)
    backend.forget(sink_id)


def settle_own(sink: AnySink, backend: TargetLedger, sink_id: str, lease: Lease | None) -> None:
    """After a write's commit or abort: forget an ``eph-`` writer's records when nothing of
    it is pending or prepared, and release its lease. Never raises: what is left is the
    next write's (or ``twopc recover``'s) to resolve."""
    try:
        if sink_id.startswith(EPHEMERAL_PREFIX):
            ledger = open_target_ledger(backend, sink_id)
            if not ledger.pending() and not sink.list_prepared(sink_id):
                forget_writer(sink, backend, sink_id)
    except TwoPCError as exc:
        log.warning("twopc: could not clear the records of write %s on %s (the next write clears them): %s",
                    sink_id, backend.location, exc)
    finally:
        if lease is not None:
            backend.release(lease)
