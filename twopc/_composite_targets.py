"""A composite's participants must write different targets: two participants writing one
table would hold two transactions of the same task attempt in it, and the second waits for
the locks the first holds until the batch commits (a prepared transaction keeps them), so
the write ends in a lock timeout after ``lockTimeout``. Refused when the write is planned.

"The same target" is what the target's server says it is where the sink can ask
(:meth:`~twopc.spi.NamedTarget.target_instance`: the server's identity and the table,
so ``localhost`` and ``127.0.0.1`` are one server), else what the options name
(:meth:`~twopc.spi.NamedTarget.target_identity`: dialect, host, port, database and the
table as the database reads it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ._errors import ConfigurationError
from ._sink import AnySink, NamedTarget, capability

__all__ = ["refuse_shared_targets"]


class _Named(Protocol):
    """What is compared of a participant (:class:`~twopc.Participant`): its name and sink."""

    @property
    def name(self) -> str: ...

    @property
    def sink(self) -> AnySink: ...


def refuse_shared_targets(participants: Sequence[_Named]) -> None:
    """Raise when two of *participants* write the same target.

    Raises:
        ConfigurationError: naming both participants, the target and the fix.
    """
    if len(participants) < 2:
        return
    targets = [capability(p.sink, NamedTarget) for p in participants]
    identities = [t.target_identity() for t in targets]
    if sum(i is not None for i in identities) < 2:
        return
    instances = [t.target_instance() if i is not None else None for t, i in zip(targets, identities, strict=True)]
    for j, b in enumerate(participants):
        for i, a in enumerate(participants[:j]):
            same_instance = instances[i] is not None and instances[i] == instances[j]
            same_identity = identities[i] is not None and identities[i] == identities[j]
            if same_instance or same_identity:
                target = (identities[i] if same_identity else
                          f"{identities[i]} and {identities[j]}, which the server says are one table: {instances[i]}")
                raise ConfigurationError(
                    f"composite participants {a.name!r} and {b.name!r} write the same target ({target}): each task "
                    f"would hold a transaction of both in it, and the second waits for the locks the first holds "
                    f"until the batch commits, so the write would end in a lock timeout. Write the table through "
                    f"one participant (one participant per table: give it all the columns, or union the rows "
                    f"before the write), or write the other rows to another table; nothing was written")
