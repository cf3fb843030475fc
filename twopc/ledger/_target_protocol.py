"""What a sink offers to keep the ledger and the writers' leases on its server
(:meth:`~twopc.spi.LedgerHost.target_ledger`); the runtime's use is :mod:`twopc._target`."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ._stores import Records

__all__ = ["Lease", "TargetLedger", "target_ledger_of"]


@dataclass(frozen=True)
class Lease:
    """A writer's lease: the server session holding its lock (``session``: PostgreSQL backend pid,
    MySQL connection id) and the local process keeping it open (credential-free, picklable)."""

    sink_id: str
    session: int
    holder_pid: int
    holder_started: int
    host: str


class TargetLedger(Protocol):
    """What a sink offers to keep the ledger and the writers' leases on its server."""

    @property
    def location(self) -> str:
        """Where the ledger lives, for messages (credential-free)."""

    def store(self, sink_id: str, lease: Lease | None = None) -> Records:
        """*sink_id*'s ledger records; with *lease*, a decision first checks it is held (else
        :class:`FencedError`)."""

    def acquire(self, sink_id: str, *, keep: bool = False) -> Lease:
        """Take *sink_id*'s lease until :meth:`release` or the driver's end (*keep*: return one this driver
        holds). Raises :class:`ConcurrentWriterError` when another writer holds it."""

    def holds(self, lease: Lease) -> bool:
        """Whether *lease*'s session still holds the lock."""

    def release(self, lease: Lease) -> None:
        """Give the lease up (never raises)."""

    def writers(self) -> list[str]:
        """Sink ids with records in the ledger (none when it does not exist yet)."""

    def take(self, sink_id: str) -> AbstractContextManager[bool]:
        """Hold *sink_id*'s lease for the block if free (yields True), else yield False."""

    def forget(self, sink_id: str) -> None:
        """Delete every record of *sink_id*."""


def target_ledger_of(sink: object) -> TargetLedger | None:
    """The sink's target ledger, or None."""
    hook = getattr(sink, "target_ledger", None)
    return hook() if hook is not None else None
