"""A writer's target against the one its checkpoint belongs to (``twopc/target.json``).

Every writer passes here before it touches the target: the Spark runtime at plan time, a
:class:`~twopc.CommitCoordinator` or :class:`~twopc.RecoveryCoordinator` built by hand (the
core API, ``twopc recover``). A write to another target (a typo, a moved server, another
database) is refused as such before anything is recorded, naming both targets; recovery run
against the wrong one would otherwise find the decided transactions missing there and call
them lost. The comparison is :meth:`CommitLedger.bind_target`'s: what the servers say they
are (:meth:`~twopc.spi.NamedTarget.target_instance`) where both can tell, so one server
reached through two names is one target.
"""

from __future__ import annotations

from ._ledger import CommitLedger
from ._sink import AnySink, NamedTarget, capability

__all__ = ["check_target"]


def check_target(sink: AnySink, ledger: CommitLedger, sink_id: str, *,
                 record: bool) -> None:
    """Refuse *sink*'s target if *ledger*'s checkpoint belongs to another one; with *record*,
    record it the first time (see :meth:`CommitLedger.bind_target`). Nothing to check for a
    ledger kept in the target itself, or a sink that cannot name its target.

    Raises:
        TargetMismatchError: the checkpoint belongs to another target.
        LedgerError: the checkpoint cannot be read or written.
    """
    if ledger.in_target:
        return
    identity = capability(sink, NamedTarget).target_identity()
    if identity is None:
        return
    ledger.bind_target(identity, sink_id, record=record, instance=capability(sink, NamedTarget).target_instance())
