"""What a sink offers to keep the commit ledger and the writers' leases on its server
(:meth:`~twopc.spi.LedgerHost.target_ledger`), as types the contract names; what the
runtime does with them is :mod:`twopc._target`."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ._stores import Records

__all__ = ["Lease", "TargetLedger", "target_ledger_of"]


@dataclass(frozen=True)
class Lease:
    """A writer's lease on the target: the server session holding its lock, and the local
    process keeping that session open for the driver (credential-free, picklable)."""

    sink_id: str
    session: int
    """The server's id of the session holding the lock (PostgreSQL backend pid, MySQL
    connection id)."""
    holder_pid: int
    holder_started: int
    host: str


class TargetLedger(Protocol):
    """What a sink offers to keep the ledger and the writers' leases on its server."""

    @property
    def location(self) -> str:
        """Where the ledger lives, for messages (credential-free)."""

    def store(self, sink_id: str, lease: Lease | None = None) -> Records:
        """The ledger records of *sink_id*; with *lease*, writing a decision first checks
        that the lease is still held (else :class:`FencedError`)."""

    def acquire(self, sink_id: str, *, keep: bool = False) -> Lease:
        """Take *sink_id*'s lease for this driver and keep it until :meth:`release` or the
        driver's end; with *keep*, a lease this driver already holds is returned as it is.
        Raises :class:`ConcurrentWriterError` when another writer holds it."""

    def holds(self, lease: Lease) -> bool:
        """Whether *lease*'s session still holds the lock."""

    def release(self, lease: Lease) -> None:
        """Give the lease up (never raises)."""

    def writers(self) -> list[str]:
        """Sink ids with records in the ledger (none when it does not exist yet)."""

    def take(self, sink_id: str) -> AbstractContextManager[bool]:
        """Hold *sink_id*'s lease for the block if it is free (yields True), else yield False."""

    def forget(self, sink_id: str) -> None:
        """Delete every record of *sink_id*."""


def target_ledger_of(sink: object) -> TargetLedger | None:
    """The sink's target ledger, or None (the default of the sink contract)."""
    hook = getattr(sink, "target_ledger", None)
    return hook() if hook is not None else None
