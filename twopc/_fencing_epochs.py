"""Who owns a checkpoint's ledger: owner epochs that fence zombie drivers.

A driver that stalls (a long GC pause, a frozen VM, a network partition) may wake up after
its query was restarted elsewhere, and record a decision for transactions the new driver's
recovery has already rolled back. The ledger fences it with records that are only ever
created, never changed (so the store's create-at-most-once makes them safe)::

    owners/<epoch>.json     {host, pid, started}: a driver took over (epochs 1, 2, ...)
    verdicts/<epoch>.json   the decisions of older epochs that stood when it took over

- **Taking over** (:meth:`Ownership.claim`, at plan time and by ``twopc recover``):
  the driver whose identity is the newest owner keeps its epoch; any other creates
  ``owners/<newest + 1>`` (retrying past a rival), then lists every undecided-looking
  decision of an older epoch into ``verdicts/<epoch>`` *before* it rolls anything back.
- **Deciding** (:meth:`Ownership.check`): after creating ``decisions/<batch>``, a driver
  lists ``owners/``; a newer epoch than its own means it was fenced (:class:`FencedError`):
  it commits nothing.
- **Reading** (:meth:`Ownership.valid`): a decision of an older epoch stands only if the
  verdict of the first owner after it lists it. A zombie's decision written after the
  takeover is not listed (its driver saw the newer owner and stopped), so it is void: the
  new owner rolls its transactions back and records its own decision for the batch.

Correctness rests on the store's create-if-absent (local hard links, S3's If-None-Match)
and on list-after-create visibility (local folders; S3 lists are strongly consistent).
Cost: one listing of ``owners/`` per decision and per plan, one read of the newest owner
per plan, and at a takeover one record plus a read of each pending decision. Owner and
verdict records are a few hundred bytes per driver start and are not purged.
"""

from __future__ import annotations

import json
from typing import Any

from ._driver_identity import DriverIdentity, driver_identity
from ._errors import DAMAGED_NEXT_STEP, FencedError, LedgerError
from ._stores import Store

__all__ = ["Ownership"]

_FORMAT = 1


def _epoch_name(epoch: int) -> str:
    return f"{epoch:020d}.json"


class Ownership:
    """The owner records of one ledger (see the module docstring)."""

    def __init__(self, store: Store, epoch: int | None) -> None:
        self._store = store
        self.epoch = epoch
        self._verdicts: dict[int, dict[int, int] | None] = {}

    def epochs(self) -> list[int]:
        """Every recorded owner epoch, oldest first."""
        out = []
        for n in self._store.list("owners"):
            stem = n.removesuffix(".json")
            if n.endswith(".json") and stem.isdigit():
                out.append(int(stem))
        return sorted(out)

    def _record(self, folder: str, epoch: int) -> dict[str, Any] | None:
        text = self._store.read(f"{folder}/{_epoch_name(epoch)}")
        if text is None:
            return None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise LedgerError(f"ledger record {self._store.path(folder, _epoch_name(epoch))} is not valid JSON: "
                              f"{DAMAGED_NEXT_STEP}") from exc
        return data if isinstance(data, dict) else None

    def claim(self, pending: Any, identity: DriverIdentity | None = None) -> int:
        """Become (or stay) the owner; return the epoch. *pending* is a callable returning
        the decisions that are not marked committed (``[(batch_id, epoch)]``), read after the
        takeover is recorded.

        Raises:
            LedgerError: the store fails.
        """
        me = dict(identity or driver_identity())
        while True:
            epochs = self.epochs()
            newest = epochs[-1] if epochs else 0
            if newest:
                rec = self._record("owners", newest)
                if rec is not None and {k: rec.get(k) for k in me} == me:
                    self.epoch = newest
                    break
            body = json.dumps({"format": _FORMAT, "epoch": newest + 1, **me}, sort_keys=True)
            if self._store.create(f"owners/{_epoch_name(newest + 1)}", body, exclusive=True):
                self.epoch = newest + 1
                break
        if self.epoch > 1 and self._verdict(self.epoch) is None:
            listed = [[b, e] for b, e in pending() if e is not None and e < self.epoch]
            self._store.create(f"verdicts/{_epoch_name(self.epoch)}",
                               json.dumps({"format": _FORMAT, "epoch": self.epoch, "decisions": listed}),
                               exclusive=True)
            self._verdicts.pop(self.epoch, None)
        return self.epoch

    def join(self, identity: DriverIdentity) -> int | None:
        """Work for the driver *identity*: take its epoch if it is the newest owner and return
        it; None (and no epoch) when another driver owns the ledger, or none does."""
        epochs = self.epochs()
        rec = self._record("owners", epochs[-1]) if epochs else None
        if rec is None or {k: rec.get(k) for k in identity} != dict(identity):
            return None
        self.epoch = epochs[-1]
        return self.epoch

    def _verdict(self, epoch: int) -> dict[int, int] | None:
        if epoch not in self._verdicts or self._verdicts[epoch] is None:
            rec = self._record("verdicts", epoch)
            self._verdicts[epoch] = None if rec is None else {int(b): int(e) for b, e in rec.get("decisions", [])}
        return self._verdicts[epoch]

    def newer_owner(self) -> int | None:
        """The newest owner epoch if it is newer than ours, else None."""
        if self.epoch is None:
            return None
        epochs = self.epochs()
        return epochs[-1] if epochs and epochs[-1] > self.epoch else None

    def check(self, location: str) -> None:
        """Raise :class:`FencedError` if a newer driver owns the ledger."""
        newer = self.newer_owner()
        if newer is not None:
            rec = self._record("owners", newer) or {}
            raise FencedError(
                f"this driver (owner epoch {self.epoch}) is no longer the owner of the ledger {location}: a "
                f"driver on {rec.get('host', '?')} (pid {rec.get('pid', '?')}) took it over as epoch {newer}. "
                f"This driver records and commits nothing more; the new owner finishes or rolls back its batch")

    def valid(self, batch_id: int, epoch: int | None) -> bool:
        """Whether a decision of *epoch* for *batch_id* stands (see the module docstring)."""
        if epoch is None or epoch == self.epoch:
            return True
        for later in self.epochs():
            if later <= epoch:
                continue
            verdict = self._verdict(later)
            if verdict is not None:
                return verdict.get(batch_id) == epoch
        return True  # no later owner has judged it yet: its own driver may still be finishing it
