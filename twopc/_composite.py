"""The composite sink: one micro-batch, several targets, one decision.

A :class:`CompositeSink` is a :class:`TwoPhaseCommitSink` made of named
:class:`~twopc.Participant` sinks (:mod:`twopc._participant`). Each task attempt opens one
transaction in every participant, gives each its own projection of the rows, and prepares
them all; its handle is a
:class:`CompositeHandle` naming every participant's handle. The driver's one decision in
the ledger names those composite handles, so a batch is committed in every target or in
none: recovery finishes every participant of a decided batch and rolls back every
participant of an undecided one.

Each participant keeps its transactions under its own sink id, ``<sink id>.<participant
name>``, so :meth:`CompositeSink.list_prepared` can ask each target for what it still holds.
Every participant of one attempt gets the attempt's nonce (:attr:`TransactionContext.nonce`),
so a participant's transaction id (an :class:`Xid`) names the composite transaction it
belongs to: ``list_prepared`` groups what the targets still hold back into composite
handles with the composite's own ``txn_id``, which a decision names. (A user's sink whose
ids are not Xids comes back as a composite of one part named ``<participant>:<txn id>``,
which the decision's handles cover too: :meth:`CompositeHandle.covered_txn_ids`.)

Because the decision is recorded before any participant commits, a participant must not be
able to refuse a commit once it prepared: one whose target may (its
:meth:`twopc.spi.WriteSetup.commit_may_be_refused` gives a reason, e.g. ``twopc-jdbc``'s staging
mode, whose table checks constraints only when the rows move) is refused on the driver by
:meth:`CompositeSink.configure_write` / :meth:`CompositeSink.validate`, before any task runs.

What a reader sees while a batch commits: the participants commit one after another
(each target all at once), so for the few milliseconds between the first and the last
participant's commit one target shows the batch and another not yet. A crash in that
window (fault point ``between_commits``) is finished by recovery; it never rolls back.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twopc import faultinject

from ._context import TransactionContext
from ._errors import ConfigurationError, HandleError, ProtocolError, TwoPCError
from ._handle import TransactionHandle, decode_handle, encode_handle, ensure_registered
from ._inspect import Headroom, PreparedDetail
from ._logs import log_event
from ._participant import Participant
from ._sink import (
    BatchCommit,
    CommitOutcome,
    CommitShape,
    Inspectable,
    MarkerPurge,
    NamedTarget,
    TwoPhaseCommitSink,
    WriteSetup,
    capability,
    commit_handles,
    refuse_overwrite,
)
from ._sink_id_record import OwnerRecord
from ._xid import Xid

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CompositeHandle", "CompositeSink", "participant_sink_id"]

log = logging.getLogger("twopc.composite")


def participant_sink_id(sink_id: str, name: str) -> str:
    """The sink id under which participant *name* of composite *sink_id* keeps its
    transactions: ``<sink id>.<name>``."""
    return f"{sink_id}.{name}"


@dataclass(frozen=True)
class CompositeHandle(TransactionHandle, kind="twopc.composite", version=1):
    """One task attempt's transactions in every participant, as ``(name, handle)`` pairs in
    the composite's participant order. The base fields are the composite's (its sink id);
    each part's handle carries its participant's sink id."""

    parts: tuple[tuple[str, TransactionHandle], ...] = ()

    def covered_txn_ids(self) -> frozenset[str]:
        """Its own id and ``<name>:<txn id>`` of every part (how ``list_prepared`` names a
        participant transaction it finds)."""
        return frozenset({self.txn_id, *(f"{name}:{h.txn_id}" for name, h in self.parts)})

    def to_payload(self) -> dict[str, Any]:
        """The base fields and ``parts`` as ``[[name, envelope], ...]`` (each part in its own
        versioned envelope)."""
        return {"txn_id": self.txn_id, "sink_id": self.sink_id, "batch_id": self.batch_id,
                "partition_id": self.partition_id, "attempt_id": self.attempt_id,
                "parts": [[name, encode_handle(h)] for name, h in self.parts]}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any], version: int) -> CompositeHandle:
        """Read a payload of :meth:`to_payload`, decoding every part's envelope.

        Raises:
            HandleVersionError: newer version; UnknownHandleKindError: a part's kind is not
                registered; HandleError: the payload is malformed.
        """
        base = super().from_payload({k: v for k, v in payload.items() if k != "parts"}, version)
        raw = payload.get("parts")
        if not isinstance(raw, list) or not all(isinstance(p, list) and len(p) == 2 for p in raw):
            raise HandleError(f"composite handle {base.txn_id!r} has malformed parts: the ledger record is damaged")
        return cls(base.txn_id, base.sink_id, base.batch_id, base.partition_id, base.attempt_id,
                   tuple((str(name), decode_handle(env)) for name, env in raw))


@dataclass
class _CompositeTxn:
    context: TransactionContext
    txns: list[tuple[Participant, Any]]
    rows: dict[str, int]


def _named(participant: Participant, exc: TwoPCError, note: str = "") -> TwoPCError:
    """*exc* again, its message prefixed with the participant (and *note*): the same class
    and attributes (a class whose constructor takes more than a message is built without
    calling it), so callers that tell errors apart by class still can."""
    text = f"composite participant {participant.name!r} ({participant.sink.describe()}){note}: {exc}"
    cls = type(exc)
    try:
        named = cls(text)
    except TypeError:
        named = cls.__new__(cls)
        named.args = (text,)
    named.__dict__.update({k: v for k, v in vars(exc).items() if k not in vars(named)})
    return named


class CompositeSink(TwoPhaseCommitSink[dict[str, Any], _CompositeTxn, CompositeHandle], WriteSetup, BatchCommit,
                    Inspectable, MarkerPurge, NamedTarget):
    """Several participant sinks that commit each batch together (see the module docstring).

    Guarantees: a batch's rows become visible in every participant or in none, exactly
    once each, whatever crashes (each participant's own guarantees carry over). Not
    guaranteed: that they become visible at the same instant (the participants commit one
    after another; a reader that needs a consistent cut reads up to the last batch every
    target has marked committed).

    Raises (construction):
        ConfigurationError: no participant, or two with the same name.
    """

    __handle_type__ = CompositeHandle

    def __init__(self, participants: Sequence[Participant]) -> None:
        self.participants = tuple(participants)
        if not self.participants:
            raise ConfigurationError("a composite sink needs at least one participant")
        names = [p.name for p in self.participants]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigurationError(f"composite participant names must be unique: {dupes} appear twice")
        self._register_kinds()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._register_kinds()

    def _register_kinds(self) -> None:
        """Register every participant's handle kind in this process (a class shipped by
        value by cloudpickle did not run the hook that registers it)."""
        for p in self.participants:
            ensure_registered(getattr(type(p.sink), "__handle_type__", TransactionHandle))

    def _participant(self, name: str) -> Participant:
        for p in self.participants:
            if p.name == name:
                return p
        raise ProtocolError(f"a composite handle names participant {name!r}, which this composite does not have "
                            f"({[p.name for p in self.participants]}): configure the same participants as the "
                            f"query that wrote the checkpoint")

    # -- driver, plan time ----------------------------------------------------------
    def configure_write(self, schema: pa.Schema, *, overwrite: bool, streaming: bool,
                        checkpointed: bool) -> None:
        """Configure every participant with its projected schema (and refuse overwrite).

        Raises:
            ConfigurationError: a participant refuses, or its commit may be refused after
                the decision (:meth:`twopc.spi.WriteSetup.commit_may_be_refused`: the staging
                mode of ``twopc-jdbc``), or two participants write the same target
                (:func:`_refuse_shared_targets`); the message names
                them and the fix.
        """
        refuse_overwrite(self, overwrite=overwrite, streaming=streaming)
        _refuse_shared_targets(self.participants)
        for p in self.participants:
            try:
                capability(p.sink, WriteSetup).configure_write(p.project_schema(schema), overwrite=overwrite,
                                                               streaming=streaming, checkpointed=checkpointed)
            except TwoPCError as exc:
                raise _named(p, exc) from exc
            _admit(p)

    def validate(self, schema: pa.Schema) -> None:
        """Validate every participant against its projected schema, on the driver, before any
        task runs: one wrong participant fails the write, and the error names it.

        Raises:
            ConfigurationError, SinkUnavailableError: as the participant's ``validate``,
                the message prefixed with the participant's name; ConfigurationError also
                for a participant whose commit may be refused (``twopc-jdbc``'s automatic
                choice of staging, settled by asking its server), before its validation.
        """
        for p in self.participants:
            _admit(p)
            try:
                capability(p.sink, WriteSetup).validate(p.project_schema(schema))
            except TwoPCError as exc:
                raise _named(p, exc) from exc

    # -- executor ------------------------------------------------------------------
    def begin_transaction(self, context: TransactionContext) -> _CompositeTxn:
        """Open one transaction in every participant, each under its own sink id. When one
        cannot be opened, those already open are rolled back."""
        context = dataclasses.replace(context, nonce=context.nonce or secrets.token_hex(4))
        txn = _CompositeTxn(context, [], {})
        try:
            for p in self.participants:
                sub = dataclasses.replace(context, sink_id=participant_sink_id(context.sink_id, p.name))
                txn.txns.append((p, p.sink.begin_transaction(sub)))
                txn.rows[p.name] = 0
        except BaseException:
            self.rollback(txn)
            raise
        return txn

    def invoke(self, txn: _CompositeTxn, value: dict[str, Any]) -> None:
        """Add one row (a dict) to every participant, projected."""
        import pyarrow as pa

        self.invoke_batch(txn, pa.RecordBatch.from_pylist([value]))

    def invoke_batch(self, txn: _CompositeTxn, batch: pa.RecordBatch) -> None:
        """Give every participant its projection of *batch*."""
        for p, t in txn.txns:
            rows = p.project(batch, txn.context.batch_id)
            if rows.num_rows:
                p.sink.invoke_batch(t, rows)
                txn.rows[p.name] += rows.num_rows

    def pre_commit(self, txn: _CompositeTxn) -> CompositeHandle:
        """Prepare every participant that got rows (roll back those that got none), in
        participant order. When one fails to prepare, the ones already prepared are
        aborted and the rest rolled back before the error is raised: nothing of the attempt
        stays prepared anywhere (what a failed abort leaves, recovery rolls back)."""
        parts: list[tuple[str, TransactionHandle]] = []
        pending = list(txn.txns)
        try:
            while pending:
                p, t = pending[0]
                if txn.rows[p.name]:
                    parts.append((p.name, p.sink.pre_commit(t)))
                else:
                    p.sink.rollback(t)
                pending.pop(0)
        except BaseException:
            for name, h in parts:
                _quietly(f"abort {name}", self._participant(name).sink.abort, h)
            for p, t in pending:
                _quietly(f"roll back {p.name}", p.sink.rollback, t)
            raise
        ctx = txn.context
        return CompositeHandle(str(ctx.xid()), ctx.sink_id, ctx.batch_id, ctx.partition_id, ctx.attempt_id,
                               tuple(parts))

    def rollback(self, txn: _CompositeTxn) -> None:
        """Roll back every participant's open transaction (each must not raise for one
        already gone; the first error is raised after all were tried)."""
        _every(txn.txns, lambda pt: pt[0].sink.rollback(pt[1]))

    # -- driver, commit --------------------------------------------------------------
    def commit(self, handle: CompositeHandle) -> CommitOutcome:
        """Commit every part (participant order); see :meth:`commit_all`."""
        return self.commit_all([handle])[0]

    def recover_and_commit(self, handle: CompositeHandle) -> CommitOutcome:
        return self.commit_all([handle], recovering=True)[0]

    def commit_may_be_refused(self) -> str | None:
        """The first participant's reason (none is admitted with one: :func:`_admit`)."""
        refusals = (capability(p.sink, WriteSetup).commit_may_be_refused() for p in self.participants)
        return next((why for why in refusals if why), None)

    def commit_shape(self, handles: Sequence[CompositeHandle] = ()) -> CommitShape:
        """Always ``WHOLE_BATCH``: each participant gets all its handles of the batch in one
        :meth:`commit_all` (a sink that commits a batch's handles together needs them
        together), and ``between_commits`` fires here, between participants."""
        return CommitShape.WHOLE_BATCH

    def commit_all(self, handles: Sequence[CompositeHandle], *, recovering: bool = False) -> list[CommitOutcome]:
        """Commit the handles of one decided batch: participant by participant, each
        participant's parts together through its own :meth:`commit_all` or one by one.

        Between two participants is the fault point ``between_commits``: the first target
        shows the batch, the next not yet. Each participant's end is logged (DEBUG event
        ``participant_committed``, ``ms_since_first``): the visibility gap of the batch.
        Idempotent as a whole (every participant's commit is), so a retry or recovery finishes a partly committed batch.

        Raises:
            SinkError: a participant failed (its error's class, the message prefixed with
                the participant and the ones committed before it); the ones before it are
                committed, and a retry (or recovery) commits the rest.
        """
        outcomes: list[list[CommitOutcome]] = [[] for _ in handles]
        done: list[str] = []
        started = time.monotonic()
        for p in self.participants:
            mine = [(i, h) for i, ch in enumerate(handles) for name, h in ch.parts if name == p.name]
            if not mine:
                continue
            if done:
                faultinject.fault_point("between_commits", batch_id=handles[0].batch_id)
            parts = [h for _, h in mine]
            try:
                got = commit_handles(p.sink, parts, recovering=recovering)
            except TwoPCError as exc:  # the operator must know which target stopped the commit
                note = f", after {', '.join(done)} committed batch {handles[0].batch_id}" if done else ""
                raise _named(p, exc, note) from exc
            done.append(p.name)
            for (i, _), outcome in zip(mine, got, strict=True):
                outcomes[i].append(outcome)
            ms = (time.monotonic() - started) * 1000
            log_event(log, logging.DEBUG, "participant_committed",
                      "twopc composite: batch %s participant %s committed %s transaction(s), %.2f ms after the first "
                      "participant's commit began", handles[0].batch_id, p.name, len(parts), ms,
                      sink_id=handles[0].sink_id, batch=handles[0].batch_id, participant=p.name,
                      transactions=len(parts), ms_since_first=round(ms, 3), recovering=recovering)
        for ch in handles:
            for name, _ in ch.parts:
                self._participant(name)  # a part of an unknown participant is refused, not skipped
        # a composite handle's outcome: LOST if a part is, COMMITTED if this call committed one, else ALREADY_COMMITTED
        rank = (CommitOutcome.LOST, CommitOutcome.COMMITTED, CommitOutcome.ALREADY_COMMITTED)
        return [min(o, key=rank.index, default=CommitOutcome.ALREADY_COMMITTED) for o in outcomes]

    def abort(self, handle: CompositeHandle) -> None:
        """Roll back every part. Every part is tried; then the first error is raised.

        Raises:
            ProtocolError: a part had been committed.
            SinkError: a target failed.
        """
        _every(handle.parts, lambda part: self._participant(part[0]).sink.abort(part[1]))

    def claim_sink_id(self, sink_id: str, owner: str) -> OwnerRecord | None:
        """Each participant's claim of its own sink id (``<sink id>.<name>``), in order;
        the first other owner found (its participant named in the removal hint). The
        participants before it keep their record naming this query: claims are not atomic
        across targets (a record only refuses other checkpoints; delete it as the error of
        a later write says, if this checkpoint is never used again)."""
        for p in self.participants:
            other: OwnerRecord | None = _asking(p, "claim_sink_id", sink_id, owner)
            if other is not None:
                return dataclasses.replace(other, remove=f"(participant {p.name!r}) {other.remove}")
        return None

    # -- recovery and the operator's view -----------------------------------------
    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> list[CompositeHandle]:
        """Every participant transaction of *sink_id* (and *batch_id*) still prepared,
        grouped into the composite transactions they belong to (see the module docstring).
        The parts of a composite handle are those still prepared: a batch whose commit
        stopped half way lists only the participants not yet committed."""
        return _group(sink_id, [(p.name, h) for p in self.participants
                                for h in _asking(p, "list_prepared", sink_id, batch_id)])

    def prepared_details(self, sink_id: str) -> list[PreparedDetail]:
        """One detail per composite transaction (as :meth:`list_prepared` groups them):
        ``holds`` names what every participant holds, the age is the oldest part's and the
        size the parts' sum when they count in the same unit."""
        found = [(p.name, d) for p in self.participants
                 for d in _asking(p, "prepared_details", sink_id)]
        out = []
        for h in _group(sink_id, [(name, d.handle) for name, d in found]):
            mine = [(name, d) for name, d in found if (name, d.handle) in h.parts]
            oldest = min((d.prepared_at for _, d in mine if d.prepared_at is not None), default=None)
            units = {d.size_unit for _, d in mine}
            sizes = [d.size for _, d in mine]
            size = sum(x for x in sizes if x is not None) if len(units) == 1 and None not in sizes else None
            out.append(PreparedDetail(h, "; ".join(f"{name}: {d.holds}" for name, d in mine),
                                      oldest, size, units.pop() if len(units) == 1 else "rows"))
        return out

    def headroom(self, sink_id: str) -> Headroom | None:
        """The participant with the least room left (``what`` prefixed with its name);
        ``None`` when no participant can tell."""
        rooms = [Headroom(f"{p.name}: {room.what}", room.in_use, room.limit) for p in self.participants
                 if (room := _asking(p, "headroom", sink_id)) is not None]
        limited = [h for h in rooms if h.limit is not None]
        return min(limited, key=lambda h: (h.limit or 0) - h.in_use) if limited else next(iter(rooms), None)

    def purge_markers(self, sink_id: str, below_batch: int) -> int:
        """Every participant's markers, under its own sink id; each participant is tried
        before the first error is raised (named)."""
        return sum(_every(self.participants, lambda p: _asking(p, "purge_markers", sink_id, below_batch)))

    def commit_mode(self) -> str:
        inner = "; ".join(f"{p.name}: {capability(p.sink, WriteSetup).commit_mode()}" for p in self.participants)
        return f"CompositeSink: one decision for {len(self.participants)} participants ({inner})"

    def describe(self) -> str:
        return "composite[" + ", ".join(f"{p.name}={p.sink.describe()}" for p in self.participants) + "]"

    def close(self) -> None:
        for p in self.participants:
            _quietly(f"close {p.name}", lambda sink: sink.close(), p.sink)


def _admit(p: Participant) -> None:
    """Refuse *p* when its target may refuse a commit after the batch is decided.

    Raises:
        ConfigurationError: naming the participant, the reason and the fix.
    """
    try:
        why = capability(p.sink, WriteSetup).commit_may_be_refused()
    except TwoPCError as exc:
        raise _named(p, exc) from exc
    if why:
        raise ConfigurationError(
            f"composite participant {p.name!r} ({p.sink.describe()}) cannot join a composite: {why}. A composite "
            f"records its one decision before any target commits, so a commit this target refuses would leave "
            f"the batch in the other targets and never in this one. Make it commit through prepared transactions "
            f"(twopc-jdbc commitMode=prepared, twopc-postgres, MariaDB/MySQL XA: an existing table, save mode "
            f"append, no upsertKeys; their PREPARE checks every constraint), or write this target in a query "
            f"of its own")


def _refuse_shared_targets(participants: Sequence[Participant]) -> None:
    """Raise when two of *participants* write the same target: each task would hold two
    transactions in it, and the second waits for the locks the first holds (a prepared
    transaction keeps them) until a lock timeout. "The same target" is what the server says
    it is where the sink can ask (:meth:`~twopc.spi.NamedTarget.target_instance`, so
    ``localhost`` and ``127.0.0.1`` are one server), else what the options name
    (:meth:`~twopc.spi.NamedTarget.target_identity`).

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


def _asking(p: Participant, method: str, sink_id: str, *args: Any) -> Any:
    """``p.sink.<method>(<p's sink id>, *args)``, a twopc error re-raised with the
    participant's name (an operator whose ``twopc status`` fails must know which target
    did not answer)."""
    try:
        return getattr(p.sink, method)(participant_sink_id(sink_id, p.name), *args)
    except TwoPCError as exc:
        raise _named(p, exc) from exc


def _group(sink_id: str, found: Sequence[tuple[str, TransactionHandle]]) -> list[CompositeHandle]:
    """Participant handles grouped by the composite transaction their Xid names (same
    batch, partition, attempt and nonce); a handle whose id is not an Xid stands alone as
    ``<participant>:<txn id>``."""
    groups: dict[str, list[tuple[str, TransactionHandle]]] = {}
    for name, h in found:
        xid = Xid.parse(h.txn_id)
        key = (str(Xid(sink_id, xid.batch_id, xid.partition_id, xid.attempt_id, xid.nonce))
               if xid is not None and xid.sink_id == participant_sink_id(sink_id, name) else f"{name}:{h.txn_id}")
        groups.setdefault(key, []).append((name, h))
    return [CompositeHandle(key, sink_id, parts[0][1].batch_id, parts[0][1].partition_id, parts[0][1].attempt_id,
                            tuple(parts)) for key, parts in groups.items()]


def _every(items: Iterable[Any], fn: Callable[[Any], Any]) -> list[Any]:
    """*fn* of every item, each tried even when one before failed; then the first error raised."""
    out, errors = [], []
    for item in items:
        try:
            out.append(fn(item))
        except Exception as exc:  # noqa: BLE001 - every item is tried; the first error is raised after
            errors.append(exc)
    if errors:
        raise errors[0]
    return out


def _quietly(what: str, fn: Callable[[Any], Any], arg: Any) -> None:
    try:
        fn(arg)
    except Exception:  # logged, not raised: the error that made us clean up is the one to see
        log.warning("twopc composite: could not %s while cleaning up (recovery finishes it)", what, exc_info=True)
