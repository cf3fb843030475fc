"""The writes whose writer died, settled by the next write to the same server (at its plan)
and by ``twopc recover``: see :mod:`twopc._target`. Apart from the target ledger itself, so
that the worker that commits a write loads no recovery."""

from __future__ import annotations

import logging

from .._driver_identity import process_identity
from .._runtime_options import EPHEMERAL_PREFIX
from .._sink import AnySink
from .._target import forget_writer, open_target_ledger
from ..ledger._target_protocol import TargetLedger
from ._recovery import RecoveryCoordinator

__all__ = ["resolve_abandoned"]

log = logging.getLogger("twopc.target")


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
                # fences it, should it come back; as this process, never as the driver JVM, which may be the
                # dead writer's own when only its lease holder died
                ledger.claim(process_identity())
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
