"""What a sink tells ``twopc status`` about its unsettled transactions and its target's room
(:class:`twopc.spi.Inspectable`); a field the target cannot tell is ``None`` ("unknown")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._handle import TransactionHandle

__all__ = ["Headroom", "PreparedDetail"]


@dataclass(frozen=True)
class PreparedDetail:
    """One transaction the target holds for a sink id, neither committed nor rolled back.

    Attributes:
        handle: its handle (batch, partition, attempt).
        holds: in the operator's words: ``prepared transaction``, ``staged rows``, ``staging
            list`` (Redis), ``prepared file``.
        prepared_at: unix seconds when prepared (or last staged), if the target can tell.
        size: how much it holds in *size_unit* (``rows``, ``bytes``, ``elements``), if known."""

    handle: TransactionHandle
    holds: str = "prepared transaction"
    prepared_at: float | None = None
    size: int | None = None
    size_unit: str = "rows"


@dataclass(frozen=True)
class Headroom:
    """How close the target is to refusing more prepared transactions.

    Attributes:
        what: what is counted (``max_prepared_transactions``, ``XA RECOVER``, ``staging keys``...).
        in_use: held now by every user of the target.
        limit: the most it allows, or ``None``."""

    what: str
    in_use: int
    limit: int | None = None

    @property
    def exhausted(self) -> bool:
        """True when the target refuses the next prepared transaction."""
        return self.limit is not None and self.in_use >= self.limit

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "in_use": self.in_use, "limit": self.limit}
