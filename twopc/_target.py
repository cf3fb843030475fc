"""The decision ledger in the target, for batch writes without ``checkpointLocation``, and the
writers' leases that tell a live writer's prepared transactions from a dead one's.

A sink that prepares transactions on a server can also keep the commit ledger there
(:meth:`twopc.spi.LedgerHost.target_ledger`): the same records as a checkpoint's ledger
(:mod:`twopc.ledger._ledger`), rows of one table keyed by sink id, each written and committed in a
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
  (:func:`twopc.operations._abandoned.resolve_abandoned`): free lease = writer gone. They take over its ledger
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

from ._errors import TwoPCError
from ._runtime_options import EPHEMERAL_PREFIX
from ._sink import AnySink, purge_markers_best_effort
from .ledger._ledger import CommitLedger
from .ledger._target_protocol import Lease, TargetLedger

__all__ = ["ALL_BATCHES", "forget_writer", "open_target_ledger", "settle_own"]

log = logging.getLogger("twopc.target")

def open_target_ledger(backend: TargetLedger, sink_id: str, *, lease: Lease | None = None,
                       epoch: int | None = None) -> CommitLedger:
    """The commit ledger of *sink_id* kept in the target."""
    return CommitLedger(f"{backend.location} sink {sink_id}", store=backend.store(sink_id, lease), epoch=epoch)


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
