"""The owner record a target keeps for a sink id (:meth:`~twopc.spi.NamedTarget.claim_sink_id`);
how the runtime claims a sink id is :mod:`twopc._sink_id_claim`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OwnerRecord"]


@dataclass(frozen=True)
class OwnerRecord:
    """The owner a target records for a sink id: its checkpoint label, and how an operator
    deletes the record (a command, for the error message)."""

    owner: str
    remove: str
