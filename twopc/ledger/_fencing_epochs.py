"""Who owns a checkpoint's ledger: owner epochs that fence zombie drivers (a stalled driver waking
after a restart or ``twopc recover``). Records are only ever created::

    owners/<epoch>.json     {host, pid, started, actor}: an actor took over (epochs 1, 2, ...)
    verdicts/<epoch>.json   the older epochs' decisions that stood when it took over
    owners/<epoch>.ended    the run that held <epoch> is over (fenced, or a new run started)

- **Taking over** (:meth:`Ownership.claim`): the newest unended owner keeps its epoch; another
  actor creates ``owners/<newest + 1>`` and records its verdict *before* it rolls anything back.
- **Never taking it back**: a displaced run records its epoch ended and raises
  :class:`FencedError`; its restart takes over (:meth:`Ownership.end_runs_of`).
- **Deciding** (:meth:`Ownership.check_owner`): after writing a decision, and before rolling
  back what it listed, an actor lists ``owners/``; a newer epoch fences it.
- **Reading** (:meth:`Ownership.valid`): an older epoch's decision stands only if the first
  newer owner's verdict lists it.

Correctness rests on create-if-absent and list-after-create visibility; every interleaving is checked by
``tests/protocol/test_fence_interleavings.py``. The records are never purged (a few hundred bytes per driver start)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._driver_identity import DriverIdentity, driver_identity
from .._errors import DAMAGED_NEXT_STEP, FencedError, LedgerError

if TYPE_CHECKING:
    from ._stores import Records

__all__ = ["Ownership"]

_FORMAT = 1


def _epoch_name(epoch: int) -> str:
    return f"{epoch:020d}.json"


def _same(record: dict[str, Any] | None, identity: DriverIdentity) -> bool:
    return record is not None and all(record.get(k) == identity[k] for k in ("host", "pid", "started"))


class Ownership:
    """The owner records of one ledger (see the module docstring)."""

    def __init__(self, store: Records, epoch: int | None,
                 pending: Callable[[], list[tuple[int, int | None]]] = list) -> None:
        self._store = store
        self.epoch = epoch
        self._pending = pending  # [(batch_id, epoch)] of the unmarked decisions, void ones too
        self._verdicts: dict[int, dict[int, int] | None] = {}

    def _listing(self) -> tuple[list[int], set[int]]:
        """Every owner epoch, oldest first, and the ended ones."""
        epochs, ended = [], set()
        for n in self._store.names("owners"):
            stem, _, kind = n.partition(".")
            if stem.isdigit() and kind == "json":
                epochs.append(int(stem))
            elif stem.isdigit() and kind == "ended":
                ended.add(int(stem))
        return sorted(epochs), ended

    def epochs(self) -> list[int]:
        """Every recorded owner epoch, oldest first."""
        return self._listing()[0]

    def _record(self, folder: str, epoch: int) -> dict[str, Any] | None:
        if (text := self._store.record(folder, _epoch_name(epoch))) is None:
            return None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise LedgerError(f"ledger record {self._store.where(folder, _epoch_name(epoch))} is not valid JSON: "
                              f"{DAMAGED_NEXT_STEP}") from exc
        return data if isinstance(data, dict) else None

    def _end(self, epoch: int, why: str, by: int | None) -> None:
        body = {"format": _FORMAT, "epoch": epoch, "why": why, "newest": by, "at": time.time()}
        self._store.add("owners", f"{epoch:020d}.ended", json.dumps(body, sort_keys=True))

    def claim(self, identity: DriverIdentity | None = None, *, resume: bool = False, actor: str = "driver") -> int:
        """Become (or stay) the owner; return the epoch once its verdict is recorded. *resume*: continue a
        run that may own an older epoch (a streaming plan), raising if it was displaced. *actor* names
        the owner's kind in messages (``driver``, ``recover`` ...).
        Raises FencedError: *resume* and another actor displaced this driver's run.
        Raises LedgerError: the store fails."""
        me = identity or driver_identity()
        while True:
            epochs, ended = self._listing()
            newest = epochs[-1] if epochs else 0
            newest_rec = self._record("owners", newest) if newest else None
            if _same(newest_rec, me) and newest not in ended:
                self.epoch = newest
                break
            if resume and newest:
                mine = next((e for e in reversed(epochs[:-1]) if _same(self._record("owners", e), me)), None)
                if mine is not None and mine not in ended:  # this run's epoch, displaced while it ran
                    self.epoch = mine
                    self._end(mine, "displaced", newest)
                    raise self._fenced_error(newest, newest_rec or {})
            body = json.dumps({"format": _FORMAT, "epoch": newest + 1, "actor": actor, "at": time.time(), **me},
                              sort_keys=True)
            if self._store.add("owners", _epoch_name(newest + 1), body):
                self.epoch = newest + 1
                break
        for e in self.epochs():  # every verdict up to ours, so a late decision of an owner
            if 1 < e <= self.epoch and self._verdict(e) is None:  # before us is judged too
                self._judge(e)
        return self.epoch

    def _judge(self, epoch: int) -> dict[int, int]:
        """Record *epoch*'s verdict if none is (the older epochs' unmarked decisions); any actor may. A
        decision created before the listing is in it; one created after is not, and its driver finds
        *epoch* when it checks the owners. Returns the standing verdict.
        Raises LedgerError: the store fails, or is read-only."""
        listed = [[b, e] for b, e in self._pending() if e is not None and e < epoch]
        self._store.add("verdicts", _epoch_name(epoch), json.dumps({"format": _FORMAT, "epoch": epoch,
                                                                   "decisions": listed}))
        self._verdicts.pop(epoch, None)
        verdict = self._verdict(epoch)
        assert verdict is not None
        return verdict

    def join(self, identity: DriverIdentity) -> int | None:
        """Take driver *identity*'s epoch if it is the newest owner; else None."""
        epochs = self.epochs()
        rec = self._record("owners", epochs[-1]) if epochs else None
        if not _same(rec, identity):
            return None
        self.epoch = epochs[-1]
        return self.epoch

    def act_for(self, identity: DriverIdentity) -> int | None:
        """Take the epoch of driver *identity*, which must own the ledger; None for a ledger without owners.
        Raises FencedError: another actor owns it."""
        epochs, ended = self._listing()
        if not epochs:
            return None
        newest = epochs[-1]
        rec = self._record("owners", newest)
        if _same(rec, identity) and newest not in ended:
            self.epoch = newest
            return newest
        mine = next((e for e in reversed(epochs) if _same(self._record("owners", e), identity)), None)
        self.epoch = mine if mine is not None else 0
        if mine is not None and mine not in ended:
            self._end(mine, "displaced", newest)
        raise self._fenced_error(newest, rec or {})

    def end_runs_of(self, identity: DriverIdentity) -> int | None:
        """Record the driver *identity*'s earlier runs over (a new run starts, and takes over instead of
        being fenced); return the epoch ended, or None."""
        epochs, ended = self._listing()
        for e in reversed(epochs):
            if _same(self._record("owners", e), identity):
                if e not in ended:
                    self._end(e, "new run", epochs[-1])
                return e
        return None

    def _verdict(self, epoch: int) -> dict[int, int] | None:
        if epoch not in self._verdicts or self._verdicts[epoch] is None:
            rec = self._record("verdicts", epoch)
            self._verdicts[epoch] = None if rec is None else {int(b): int(e) for b, e in rec.get("decisions", [])}
        return self._verdicts[epoch]

    def newer_owner(self) -> int | None:
        """The newest owner epoch if newer than ours, else None."""
        if self.epoch is None:
            return None
        epochs = self.epochs()
        return epochs[-1] if epochs and epochs[-1] > self.epoch else None

    def check_owner(self) -> None:
        """Raise :class:`FencedError` (recording this run over) if a newer actor owns the ledger."""
        if (newer := self.newer_owner()) is None:
            return
        assert self.epoch is not None
        if self.epoch not in self._listing()[1]:
            self._end(self.epoch, "fenced", newer)
        raise self._fenced_error(newer, self._record("owners", newer) or {})

    def _fenced_error(self, newer: int, rec: dict[str, Any]) -> FencedError:
        actor = rec.get("actor", "driver")
        who = "twopc recover" if actor == "recover" else f"a {actor}"
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(rec["at"])) if rec.get("at") else "?"
        return FencedError(
            f"this writer (owner epoch {self.epoch} of the ledger {self._store.root}) was displaced by {who} on "
            f"{rec.get('host', '?')} (pid {rec.get('pid', '?')}) at {when}, owner epoch {newer}: it records, "
            f"commits and rolls back nothing more. Nothing decided is lost: a batch in flight was not decided and "
            f"is written again. Restart the query (or rerun the write) once the other writer is done; the restart "
            f"takes the checkpoint over")

    def valid(self, batch_id: int, epoch: int | None) -> bool:
        """Whether *epoch*'s decision for *batch_id* stands: while no later owner exists, else if the FIRST
        later owner's verdict lists it. A missing verdict is recorded first (a later one could void a
        decision the first will list); a read-only reader counts it as standing."""
        if epoch is None or epoch == self.epoch:
            return True
        first = next((e for e in self.epochs() if e > epoch), None)
        if first is None:
            return True
        if (verdict := self._verdict(first)) is None:
            from ._stores import ReadOnlyRecords  # the store's kind: loaded with it when it is one
            if isinstance(self._store, ReadOnlyRecords):  # twopc status, a metrics scrape: it may stand
                return True
            verdict = self._judge(first)
        return verdict.get(batch_id) == epoch
