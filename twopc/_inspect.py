"""What a sink can tell an operator about its unsettled transactions and its target's room.

:meth:`twopc.spi.Inspectable.prepared_details` and :meth:`twopc.spi.Inspectable.headroom` return
these; ``twopc status`` (:mod:`twopc.operations._status`) shows them. Every field a target cannot tell
is ``None``: the status view says "unknown" rather than guessing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._handle import TransactionHandle

__all__ = ["Headroom", "PreparedDetail"]


@dataclass(frozen=True)
class PreparedDetail:
    """One transaction the target holds for a sink id, not committed and not rolled back.

    Attributes:
        handle: its handle (batch, partition and attempt are the handle's).
        holds: what the target keeps for it, in words the operator knows: ``prepared
            transaction`` (PostgreSQL, MySQL/MariaDB XA), ``staged rows`` (the staging
            mode), ``staging list`` (Redis), ``prepared file`` (the file sink).
        prepared_at: unix seconds when the target prepared (or last staged) it, when the
            target can tell (``pg_prepared_xacts.prepared``, a file's mtime, a Redis key's
            idle time); ``None`` otherwise.
        size: how much it holds, in *size_unit*, when the target can tell; else ``None``.
        size_unit: ``rows``, ``bytes`` or ``elements``.
    """

    handle: TransactionHandle
    holds: str = "prepared transaction"
    prepared_at: float | None = None
    size: int | None = None
    size_unit: str = "rows"


@dataclass(frozen=True)
class Headroom:
    """How close the target is to refusing more prepared transactions.

    Attributes:
        what: what is counted (``max_prepared_transactions``, ``XA RECOVER``,
            ``staging keys``...).
        in_use: how many are held now, by every user of the target (not only this sink).
        limit: the most the target allows, or ``None`` when it has no such limit.
    """

    what: str
    in_use: int
    limit: int | None = None

    @property
    def exhausted(self) -> bool:
        """True when the target refuses the next prepared transaction."""
        return self.limit is not None and self.in_use >= self.limit

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "in_use": self.in_use, "limit": self.limit}
