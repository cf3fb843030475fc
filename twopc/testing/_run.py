"""One check's working state: its sinks, ids, sink ids, and the assertions every check shares."""

from __future__ import annotations

import contextlib
import itertools
import logging
import secrets
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, NoReturn

from .._context import TransactionContext
from .._errors import TransactionLostError, redact
from .._handle import TransactionHandle
from .._sink import BatchCommit, CommitOutcome, CommitShape, capability
from ._harness import AnySink, ContractViolation, SinkHarness

__all__ = ["CheckRun", "few"]

log = logging.getLogger("twopc.testing")

#: Each check takes ids from a random range of this size: checks never see each other's rows.
ID_RANGE = 10_000


def few(values: Iterable[Any], n: int = 6) -> str:
    """At most *n* values, for a message."""
    items = sorted(values)
    return repr(items[:n])[:-1] + (f", ... ({len(items)} in all)]" if len(items) > n else "]")


class CheckRun(contextlib.AbstractContextManager["CheckRun"]):
    """One check's state (``with CheckRun(harness, "name") as run:``). A clean exit verifies nothing of its sink ids
    is left prepared and runs the harness's ``verify``; any exit rolls back what is left and closes its sinks."""

    def __init__(self, harness: SinkHarness, check: str) -> None:
        self.harness = harness
        self.check = check
        self.secrets = sorted(harness.secret_strings(), key=len, reverse=True)  # a secret before its parts
        self.base = (secrets.randbelow(2**30) + 1) * ID_RANGE
        self._used = 0
        self._attempts = itertools.count(1)
        self.sink_ids: list[str] = []
        self.sinks: list[AnySink] = []
        self.sink = self.new_sink()

    # -- set-up ----------------------------------------------------------------------
    def new_sink(self) -> AnySink:
        """A sink from the harness's options only, as on a restarted driver."""
        return self.adopt(self.harness.new_sink())

    def adopt(self, sink: AnySink) -> AnySink:
        """Close *sink* with the check's own."""
        self.sinks.append(sink)
        return sink

    def sink_id(self, sink_id: str | None = None) -> str:
        """A fresh sink id (or *sink_id*), verified when the check ends."""
        sid = sink_id or f"kit{uuid.uuid4().hex[:12]}"
        self.sink_ids.append(sid)
        return sid

    def ids(self, n: int) -> list[int]:
        """*n* ids no other check (or run) uses."""
        if self._used + n > ID_RANGE:
            raise RuntimeError("a check used more ids than ID_RANGE")
        out = list(range(self.base + self._used, self.base + self._used + n))
        self._used += n
        return out

    def context(self, sink_id: str, batch: int, partition: int, attempt: int | None = None) -> TransactionContext:
        return TransactionContext(sink_id, batch, partition, next(self._attempts) if attempt is None else attempt)

    def prepare(self, sink_id: str, batch: int, partition: int, ids: Sequence[int], *,
                sink: AnySink | None = None, by_row: bool = False) -> TransactionHandle:
        """One task attempt (``invoke_batch``, or ``invoke`` per row *by_row*) prepared; the handle is
        checked to name its context."""
        __tracebackhide__ = True
        sink = sink or self.sink
        ctx = self.context(sink_id, batch, partition)
        txn = sink.begin_transaction(ctx)
        try:
            batch_rows = self.harness.rows(list(ids))
            if by_row:
                for row in batch_rows.to_pylist():
                    sink.invoke(txn, row)
            else:
                sink.invoke_batch(txn, batch_rows)
            handle = sink.pre_commit(txn)
        except BaseException:
            with contextlib.suppress(Exception):
                sink.rollback(txn)
            raise
        if not isinstance(handle, TransactionHandle):
            self.fail(f"pre_commit returned {type(handle).__name__}, not a TransactionHandle")
        got = (handle.sink_id, handle.batch_id, handle.partition_id, handle.attempt_id)
        want = (ctx.sink_id, ctx.batch_id, ctx.partition_id, ctx.attempt_id)
        if got != want or not isinstance(handle.txn_id, str) or not handle.txn_id:
            self.fail(f"pre_commit's handle names (sink, batch, partition, attempt) {got} and txn_id "
                      f"{handle.txn_id!r:.80}, but the transaction was opened for {want}: the coordinator "
                      f"routes and checks handles by these fields")
        return handle

    # -- driving the sink like the coordinator does ------------------------------------
    def commit(self, handles: Sequence[TransactionHandle], *, sink: AnySink | None = None,
               recovering: bool = False) -> list[CommitOutcome]:
        """Commit one batch's *handles* as the coordinator does; a ``TransactionLostError`` is ``LOST``."""
        __tracebackhide__ = True
        sink = sink or self.sink
        try:
            if (outcomes := capability(sink, BatchCommit).commit_all(list(handles), recovering=recovering)) is None:
                outcomes = [sink.recover_and_commit(h) if recovering else sink.commit(h) for h in handles]
        except TransactionLostError as exc:
            self.clean(str(exc), "a TransactionLostError message")
            return [CommitOutcome.LOST] * len(handles)
        outcomes = list(outcomes)
        if len(outcomes) != len(handles) or not all(isinstance(o, CommitOutcome) for o in outcomes):
            self.fail(f"committing {len(handles)} handle(s) answered {outcomes!r}: expected one CommitOutcome each")
        return outcomes

    def expect_outcome(self, handles: Sequence[TransactionHandle], want: CommitOutcome, what: str, *,
                       sink: AnySink | None = None, recovering: bool = False) -> None:
        __tracebackhide__ = True
        got = self.commit(handles, sink=sink, recovering=recovering)
        if any(o is not want for o in got):
            names = ", ".join(o.name for o in got)
            self.fail(f"{what}: {'recover_and_commit' if recovering else 'commit'} answered {names}, "
                      f"expected {want.name}")

    def atomic(self, handles: Sequence[TransactionHandle]) -> bool:
        """Whether the sink commits these handles in one local transaction (answers per batch)."""
        return capability(self.sink, BatchCommit).commit_shape(list(handles)) is CommitShape.LOCAL_TRANSACTION

    def listed(self, sink_id: str, batch_id: int | None = None, *, sink: AnySink | None = None
               ) -> dict[str, TransactionHandle]:
        """``list_prepared`` as ``{txn_id: handle}``, each checked to belong to the query."""
        __tracebackhide__ = True
        sink = sink or self.sink
        found = sink.list_prepared(sink_id) if batch_id is None else sink.list_prepared(sink_id, batch_id)
        out: dict[str, TransactionHandle] = {}
        for h in found:
            if not isinstance(h, TransactionHandle) or h.sink_id != sink_id or (
                    batch_id is not None and h.batch_id != batch_id):
                self.fail(f"list_prepared({sink_id!r}, {batch_id!r}) returned {h!r:.200}, which belongs to "
                          f"another sink id or batch")
            out[h.txn_id] = h
        return out

    # -- what the target shows -------------------------------------------------------
    def visible(self) -> Counter[int]:
        """This check's visible ids, with their counts."""
        lo, hi = self.base, self.base + ID_RANGE
        return Counter(i for i in (int(x) for x in self.harness.read_ids()) if lo <= i < hi)

    def expect_visible(self, ids: Iterable[int], when: str) -> None:
        """Fail unless exactly *ids*, once each, are visible."""
        __tracebackhide__ = True
        want = Counter(ids)
        got = self.visible()
        if got == want:
            return
        lost = set(want) - set(got)
        dup = {i for i, n in got.items() if n > 1}
        extra = set(got) - set(want)
        self.fail(f"{when}: expected {len(want)} id(s) visible exactly once; lost {few(lost)}, "
                  f"duplicated {few(dup)}, unexpected (never committed) {few(extra)}")

    # -- verdicts --------------------------------------------------------------------
    def fail(self, message: str) -> NoReturn:
        __tracebackhide__ = True
        raise ContractViolation(self.check, f"{self.harness.label}: {redact(message, self.secrets)}")

    def clean(self, text: str, where: str) -> None:
        """Fail when *text* contains a secret."""
        __tracebackhide__ = True
        if any(s in text for s in self.secrets):
            self.fail(f"{where} contains a credential from the sink's options")

    def finish(self) -> None:
        """Nothing left prepared, then the harness's ``verify``."""
        __tracebackhide__ = True
        for sid in self.sink_ids:
            if left := self.listed(sid):
                self.fail(f"transactions left prepared under sink id {sid!r} after the check: {few(left)}")
        if self.harness.verify is not None:
            for sid in self.sink_ids:
                try:
                    self.harness.verify(sid)
                except AssertionError as exc:
                    self.fail(f"the harness's verify({sid!r}) failed: {exc}")

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if exc_type is None:
                self.finish()
        finally:
            self._roll_back_leftovers()
            for sink in self.sinks:
                with contextlib.suppress(Exception):
                    sink.close()

    def _roll_back_leftovers(self) -> None:
        """Best effort: leave no prepared transaction (locks, slots) to the next test."""
        for sid in self.sink_ids:
            try:
                handles = list(self.sink.list_prepared(sid))
            except Exception:
                log.debug("twopc.testing: cannot list leftovers of %s", sid, exc_info=True)
                continue
            for h in handles:
                try:
                    self.sink.abort(h)
                except Exception:
                    log.debug("twopc.testing: cannot roll back leftover %s", h.txn_id, exc_info=True)
