"""The writes whose writer died, settled by the next write to the server and by ``twopc recover``
(:mod:`twopc._target`); apart, so the committing worker loads no recovery."""

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
    """Finish and roll back what every writer with a free lease left (except *skip*), forgetting a resolved ``eph-``
    writer; one with nothing to finish is not claimed. Returns the sink ids whose lease was free.
    Raises SinkError / LedgerError: the target failed (what was resolved stays resolved)."""
    done = []
    for writer in (w for w in backend.writers() if w != skip):
        with backend.take(writer) as free:
            if not free:
                log.info("twopc: the writer with sink id %s on %s is alive (it holds its lease): its "
                         "transactions are left alone", writer, backend.location)
                continue
            ledger = open_target_ledger(backend, writer)
            if ledger.pending() or sink.list_prepared(writer):
                # fences it; as this process, not the driver JVM (maybe the dead writer's own)
                ledger.claim(process_identity())
                report = RecoveryCoordinator(sink, ledger, sink_id=writer, claimed=True).run()  # holds its lease
                if report.changed_anything:
                    log.warning("twopc: resolved the abandoned write %s on %s: %s", writer, backend.location,
                                report.summary())
            # else no claim (it would add records to a finished txnAppId writer at every write); a zombie
            # still cannot decide: the lease check refuses it, and a later decision names what we would list
            if writer.startswith(EPHEMERAL_PREFIX) and not ledger.pending() and not sink.list_prepared(writer):
                forget_writer(sink, backend, writer)
            done.append(writer)
    return done
