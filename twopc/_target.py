"""The decision ledger in the target, for batch writes without ``checkpointLocation``, and the writers' leases. A
sink preparing on a server can keep the ledger there (:meth:`twopc.spi.LedgerHost.target_ledger`: rows keyed by sink
id, committed locally beside the prepared transactions); such a write runs under a fresh sink id (``eph-...``, or its
``txnAppId``) and its decision survives its driver. With no single owner, every writer's driver holds a **lease** (a
session lock keyed by its sink id) while it writes:

- it takes the lease before recording anything; a held lease is another live writer:
  :class:`ConcurrentWriterError` before anything is touched;
- the next write to the server and ``twopc recover`` resolve only writers whose lease they can
  take (free lease = writer gone, :func:`twopc.operations._abandoned.resolve_abandoned`): they
  take the ledger over and finish or roll back what it left;
- a writer that lost its lease (a zombie) is refused at its decision (:class:`FencedError`): the store checks the
  lease right before the decision row, and the takeover's epoch fences one written after the check."""

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
    """Delete ``eph-`` writer *sink_id*'s markers, then its records (nothing pending or prepared: its
    id is never reused). Markers first, so a failure leaves records that find it again.
    Raises TwoPCError: the target failed (a failed marker purge is only logged)."""
    purge_markers_best_effort(sink, sink_id, ALL_BATCHES)
    backend.forget(sink_id)


def settle_own(sink: AnySink, backend: TargetLedger, sink_id: str, lease: Lease | None) -> None:
    """After a write's commit or abort: forget an ``eph-`` writer with nothing pending or prepared and
    release its lease. Never raises: what is left is the next write's to resolve."""
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
