"""The operator's view of one sink (read-only): :func:`sink_status` reads the ledger and the target;
``twopc status`` prints it, :attr:`SinkStatus.needs_operator` is its exit code. States:

- ``in-doubt``: named by a decision and still prepared; ``twopc recover`` or a restart commits it.
- ``decided-gone``: named by an unfinished decision, no longer held: committed before the mark
  (recover marks it) or lost (``--accept-lost``).
- ``orphan``: named by no decision (a failed, retried or speculative attempt, or the batch in
  flight). Recovery rolls it back."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .._advice import command, recover_command
from .._coordinator import classify_prepared
from .._inspect import Headroom, PreparedDetail
from .._sink import AnySink, Inspectable, capability
from ..ledger._ledger import CommitLedger
from ._metrics import failing_batch, load_state

__all__ = ["SinkStatus", "UnsettledTransaction", "sink_status"]

#: Runs of one batch without a commit after which status (and the alert rules) call the query stuck.
STUCK_AFTER = 3
IN_DOUBT = "in-doubt"
DECIDED_GONE = "decided-gone"
ORPHAN = "orphan"


@dataclass(frozen=True)
class UnsettledTransaction:
    """One unsettled transaction."""

    state: str
    txn_id: str
    batch_id: int
    partition_id: int
    attempt_id: int
    holds: str
    age_seconds: float | None  # since prepared, else since the decision (age_from says which)
    age_from: str | None
    size: int | None
    size_unit: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SinkStatus:
    """The state of one sink id: its ledger and what its target holds."""

    sink_id: str
    target: str
    checkpoint: str
    last_decided: int | None
    last_committed: int | None
    in_doubt_batches: tuple[int, ...]
    transactions: tuple[UnsettledTransaction, ...]
    headroom: Headroom | None
    checked_at: float = field(default_factory=time.time)
    failing: tuple[int, int] | None = None  # (batch, runs) that ended without a commit since the last one
    in_target: bool = False  # the ledger is kept in the target
    how: tuple[str, ...] = ()  # the secret-free arguments that reached the target, for the advice

    @property
    def needs_operator(self) -> bool:
        """True when something is unsettled, the target is out of room, or a batch failed at every run
        since the last commit (:data:`STUCK_AFTER` times or more)."""
        return (bool(self.in_doubt_batches or self.transactions) or bool(self.headroom and self.headroom.exhausted)
                or bool(self.failing and self.failing[1] >= STUCK_AFTER))

    def advice(self) -> list[str]:
        """What to do: one line per state found, with a command that works in it."""
        def recover(*extra: str) -> str:
            if self.in_target:
                sink = ("--sink-id", self.sink_id) if extra else ()
                return command("recover", *self.how, *sink, *extra) if self.how else recover_command(
                    None, *extra, sink_id=self.sink_id if extra else None)
            return command("recover", "--checkpoint", self.checkpoint, *self.how, *extra)
        again = "rerun the write" if self.in_target else "restart the query"
        states = {t.state for t in self.transactions}
        out = []
        if IN_DOUBT in states:
            out.append(f"in doubt: a decided batch waits to be committed; nothing is lost. Finish it: {recover()} "
                       f"(or {again})")
        out += [f"decided-gone: batch {batch}'s transactions are no longer prepared: committed (recover only marks "
                f"the batch) or lost. Run {recover()}; if it reports them lost, restore the batch's rows, then "
                f"{recover('--accept-lost', str(batch))}"
                for batch in sorted({t.batch_id for t in self.transactions if t.state == DECIDED_GONE})]
        if ORPHAN in states:
            out.append(f"orphan: a batch that no decision names; while the query runs, its batch in flight shows here "
                       f"(nothing to do). If no query runs: {recover()} rolls them back (so does a restart)")
        if self.headroom is not None and self.headroom.exhausted:
            out.append(f"headroom: the target holds {self.headroom.in_use} of {self.headroom.limit} "
                       f"{self.headroom.what}: roll back other users' stale prepared transactions or raise the limit")
        if self.failing and self.failing[1] >= STUCK_AFTER:
            batch, runs = self.failing
            out.append(f"stuck: batch {batch} failed at each of its last {runs} runs (Spark aborted it, or its commit "
                       f"raised): the driver's console names the error of each run; fix its cause, then restart the "
                       f"query (restarting alone does not help)")
        return out

    @property
    def oldest_in_doubt_seconds(self) -> float | None:
        return max((t.age_seconds for t in self.transactions if t.state != ORPHAN and t.age_seconds is not None),
                   default=None)

    def to_json(self) -> dict[str, Any]:
        return {
            "sink_id": self.sink_id, "target": self.target, "checkpoint": self.checkpoint,
            "last_decided_batch": self.last_decided, "last_committed_batch": self.last_committed,
            "in_doubt_batches": list(self.in_doubt_batches),
            "transactions": [t.to_json() for t in self.transactions],
            "headroom": self.headroom.to_json() if self.headroom else None,
            "needs_operator": self.needs_operator, "checked_at": self.checked_at,
            "failing_batch": (None if self.failing is None
                              else {"batch": self.failing[0], "failed_runs": self.failing[1]}),
            "advice": self.advice(),
        }

    def render(self) -> str:
        """The human table ``twopc status`` prints."""
        lines = [f"sink {self.sink_id} on {self.target}", f"checkpoint {self.checkpoint}",
                 (f"last decided batch: {_or_none(self.last_decided)}   "
                  f"last committed batch: {_or_none(self.last_committed)}")]
        if self.in_doubt_batches:
            lines.append(f"batches decided but not committed (in doubt): {list(self.in_doubt_batches)}")
        if self.transactions:
            rows = [("STATE", "BATCH", "PARTITION", "ATTEMPT", "AGE", "SIZE", "HOLDS", "TRANSACTION")]
            rows += [(t.state, str(t.batch_id), str(t.partition_id), str(t.attempt_id), _age(t),
                      "?" if t.size is None else f"{t.size} {t.size_unit}", t.holds, t.txn_id)
                     for t in self.transactions]
            widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
            lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in rows]
        else:
            lines.append("no unsettled transactions")
        if self.headroom is not None:
            h = self.headroom
            limit = f" of {h.limit} allowed" if h.limit is not None else " (no limit)"
            lines.append(f"headroom: {h.what}: {h.in_use} in use{limit}{'  EXHAUSTED' if h.exhausted else ''}")
        if self.failing is not None and self.failing[1] < STUCK_AFTER:
            lines.append(f"batch {self.failing[0]} failed at its last {self.failing[1]} run(s) (not committed since)")
        if self.needs_operator:
            lines += ["needs an operator:", *(f"  {a}" for a in self.advice())]
        else:
            lines.append("ok: nothing needs an operator")
        return "\n".join(lines)


def _or_none(batch: int | None) -> str:
    return "none" if batch is None else str(batch)


def _age(t: UnsettledTransaction) -> str:
    if t.age_seconds is None:
        return "?"
    s = int(t.age_seconds)
    text = f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"
    return text + ("" if t.age_from == "target" else " (decided)")


def sink_status(sink: AnySink, ledger: CommitLedger, sink_id: str) -> SinkStatus:
    """Read *sink_id*'s state from *ledger* and *sink*'s target; change nothing.

    Raises:
        SinkError: the target failed.
        LedgerError: the checkpoint cannot be read.
    """
    now = time.time()
    pending = ledger.pending()
    details = {d.handle.txn_id: d for d in capability(sink, Inspectable).prepared_details(sink_id)}
    decided, orphans = classify_prepared(ledger, [d.handle for d in details.values()], up_to_batch=None)
    decided_at = {d.batch_id: d.decided_at for d in ledger.decisions(sorted({h.batch_id for h in decided}))}
    txns = [_unsettled(IN_DOUBT, details[h.txn_id], decided_at.get(h.batch_id), now) for h in decided]
    for decision in pending:
        txns += [_unsettled(DECIDED_GONE, PreparedDetail(h, "nothing (committed or lost)"), decision.decided_at, now)
                 for h in decision.handles if not h.covered_txn_ids() & details.keys()]
    txns += [_unsettled(ORPHAN, details[h.txn_id], None, now) for h in orphans]
    txns.sort(key=lambda t: (t.batch_id, t.state, t.partition_id, t.txn_id))
    decided_batches = ledger.decided_batches()
    return SinkStatus(sink_id, sink.describe(), ledger.checkpoint_location,
                      decided_batches[-1] if decided_batches else None, ledger.latest_committed(),
                      tuple(d.batch_id for d in pending), tuple(txns),
                      capability(sink, Inspectable).headroom(sink_id), now,
                      failing_batch(load_state(ledger)), ledger.in_target)


def _unsettled(state: str, d: PreparedDetail, decided_at: float | None, now: float) -> UnsettledTransaction:
    h = d.handle
    if d.prepared_at is not None:
        age, source = max(0.0, now - d.prepared_at), "target"
    elif decided_at is not None and decided_at > 0:
        age, source = max(0.0, now - decided_at), "decision"
    else:
        age, source = None, None
    return UnsettledTransaction(state, h.txn_id, h.batch_id, h.partition_id, h.attempt_id, d.holds, age, source,
                                d.size, d.size_unit)

