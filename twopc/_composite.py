"""The composite sink: one micro-batch, several targets, one decision.

Each task attempt opens a transaction in every named :class:`~twopc.Participant`, gives each its projection of the
rows and prepares them all; its :class:`CompositeHandle` names every part, and the ledger's one decision names those,
so recovery commits a batch in every target or rolls it back in all. A participant keeps its transactions under
``<sink id>.<name>``, and the attempt's shared nonce lets :meth:`CompositeSink.list_prepared` group what the targets
hold back into composite handles (a non-Xid id comes back as ``<participant>:<txn id>``,
:meth:`CompositeHandle.covered_txn_ids`).

The decision precedes every commit, so a participant whose target may refuse a commit
(:meth:`twopc.spi.WriteSetup.commit_may_be_refused`, e.g. ``twopc-jdbc`` staging) is refused
at plan time. Participants commit one after another: for a few milliseconds one target shows
the batch and another not yet; a crash there (``between_commits``) is finished by recovery."""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
from collections import Counter
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
    """The sink id of participant *name* of composite *sink_id*: ``<sink id>.<name>``."""
    return f"{sink_id}.{name}"


@dataclass(frozen=True)
class CompositeHandle(TransactionHandle, kind="twopc.composite", version=1):
    """One attempt's ``(name, handle)`` pairs in participant order; the base fields are the
    composite's, each part carries its participant's sink id."""

    parts: tuple[tuple[str, TransactionHandle], ...] = ()

    def covered_txn_ids(self) -> frozenset[str]:
        """Its own id and every part's ``<name>:<txn id>`` (how ``list_prepared`` names a lone part)."""
        return frozenset({self.txn_id, *(f"{name}:{h.txn_id}" for name, h in self.parts)})

    def to_payload(self) -> dict[str, Any]:
        """The base fields and ``parts`` as ``[[name, envelope], ...]``."""
        return {"txn_id": self.txn_id, "sink_id": self.sink_id, "batch_id": self.batch_id,
                "partition_id": self.partition_id, "attempt_id": self.attempt_id,
                "parts": [[name, encode_handle(h)] for name, h in self.parts]}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any], version: int) -> CompositeHandle:
        """Decode :meth:`to_payload`'s payload and every part's envelope.
        Raises HandleVersionError, UnknownHandleKindError, HandleError: as :func:`decode_handle`."""
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
    """*exc* of the same class and attributes, its message prefixed with the participant and *note*."""
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

    A batch's rows become visible in every participant or in none, exactly once, whatever crashes; not at the same
    instant (a reader needing a consistent cut reads up to the last batch every target marked committed).
    Raises ConfigurationError: no participant, or two with the same name."""

    __handle_type__ = CompositeHandle

    def __init__(self, participants: Sequence[Participant]) -> None:
        self.participants = tuple(participants)
        if not self.participants:
            raise ConfigurationError("a composite sink needs at least one participant")
        if dupes := sorted(n for n, k in Counter(p.name for p in self.participants).items() if k > 1):
            raise ConfigurationError(f"composite participant names must be unique: {dupes} appear twice")
        self._register_kinds()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._register_kinds()

    def _register_kinds(self) -> None:
        """Register every participant's handle kind here (cloudpickled classes skip the hook)."""
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
        """Configure every participant with its projected schema; refuse overwrite.
        Raises ConfigurationError: a participant refuses, its commit may be refused after the decision,
        or two participants write the same target; naming them and the fix."""
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
        """Validate every participant against its projected schema before any task runs.
        Raises ConfigurationError, SinkUnavailableError: the participant's, prefixed with its name
        (also for a commit that may be refused, e.g. ``twopc-jdbc``'s automatic staging)."""
        for p in self.participants:
            _admit(p)
            try:
                capability(p.sink, WriteSetup).validate(p.project_schema(schema))
            except TwoPCError as exc:
                raise _named(p, exc) from exc

    # -- executor ------------------------------------------------------------------
    def begin_transaction(self, context: TransactionContext) -> _CompositeTxn:
        """Open a transaction in every participant under its own sink id (all rolled back if one fails)."""
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
        import pyarrow as pa
        self.invoke_batch(txn, pa.RecordBatch.from_pylist([value]))

    def invoke_batch(self, txn: _CompositeTxn, batch: pa.RecordBatch) -> None:
        for p, t in txn.txns:
            rows = p.project(batch, txn.context.batch_id)
            if rows.num_rows:
                p.sink.invoke_batch(t, rows)
                txn.rows[p.name] += rows.num_rows

    def pre_commit(self, txn: _CompositeTxn) -> CompositeHandle:
        """Prepare every participant that got rows, in order (roll back the others). On failure the
        prepared ones are aborted and the rest rolled back before raising (recovery cleans up the rest)."""
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
        """Roll back every participant's transaction, then raise the first error."""
        _every(txn.txns, lambda pt: pt[0].sink.rollback(pt[1]))

    # -- driver, commit --------------------------------------------------------------
    def commit(self, handle: CompositeHandle) -> CommitOutcome:
        return self.commit_all([handle])[0]

    def recover_and_commit(self, handle: CompositeHandle) -> CommitOutcome:
        return self.commit_all([handle], recovering=True)[0]

    def commit_may_be_refused(self) -> str | None:
        """The first participant's reason (none is admitted with one)."""
        refusals = (capability(p.sink, WriteSetup).commit_may_be_refused() for p in self.participants)
        return next((why for why in refusals if why), None)

    def commit_shape(self, handles: Sequence[CompositeHandle] = ()) -> CommitShape:
        """``WHOLE_BATCH``: each participant commits its handles together; ``between_commits`` fires
        between participants."""
        return CommitShape.WHOLE_BATCH

    def commit_all(self, handles: Sequence[CompositeHandle], *, recovering: bool = False) -> list[CommitOutcome]:
        """Commit one decided batch participant by participant, idempotent as a whole. The fault point
        ``between_commits`` lies between two participants; each one's end is logged (DEBUG
        ``participant_committed``, ``ms_since_first``: the batch's visibility gap).
        Raises SinkError: a participant failed (its class, the message naming it and the ones committed
        before it); a retry or recovery commits the rest."""
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
        """Roll back every part, then raise the first error.
        Raises ProtocolError: a part had been committed.
        Raises SinkError: a target failed."""
        _every(handle.parts, lambda part: self._participant(part[0]).sink.abort(part[1]))

    def claim_sink_id(self, sink_id: str, owner: str) -> OwnerRecord | None:
        """Each participant's claim of ``<sink id>.<name>`` in order; the first other owner found, its
        participant named. Not atomic across targets: earlier participants keep their record."""
        for p in self.participants:
            other: OwnerRecord | None = _asking(p, "claim_sink_id", sink_id, owner)
            if other is not None:
                return dataclasses.replace(other, remove=f"(participant {p.name!r}) {other.remove}")
        return None

    # -- recovery and the operator's view -----------------------------------------
    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> list[CompositeHandle]:
        """Participant transactions still prepared, grouped by composite transaction (a half-committed
        batch lists only the participants not yet committed)."""
        return _group(sink_id, [(p.name, h) for p in self.participants
                                for h in _asking(p, "list_prepared", sink_id, batch_id)])

    def prepared_details(self, sink_id: str) -> list[PreparedDetail]:
        """One detail per composite transaction: every part's ``holds``, the oldest age, the summed size
        when the units agree."""
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
        """The participant with the least room left (``what`` prefixed with its name), or ``None``."""
        rooms = [Headroom(f"{p.name}: {room.what}", room.in_use, room.limit) for p in self.participants
                 if (room := _asking(p, "headroom", sink_id)) is not None]
        limited = [h for h in rooms if h.limit is not None]
        return min(limited, key=lambda h: (h.limit or 0) - h.in_use) if limited else next(iter(rooms), None)

    def purge_markers(self, sink_id: str, below_batch: int) -> int:
        """Every participant's markers under its own sink id; all tried, then the first error raised."""
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
    """Refuse *p* when its target may refuse a commit after the decision.
    Raises ConfigurationError: naming the participant, the reason and the fix."""
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
    """Refuse two participants writing the same target (same instance, else identity): the second
    transaction would wait for the first's locks until a lock timeout.
    Raises ConfigurationError: naming both participants, the target and the fix."""
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
    """``p.sink.<method>(<p's sink id>, *args)``, a twopc error re-raised naming the participant."""
    try:
        return getattr(p.sink, method)(participant_sink_id(sink_id, p.name), *args)
    except TwoPCError as exc:
        raise _named(p, exc) from exc


def _group(sink_id: str, found: Sequence[tuple[str, TransactionHandle]]) -> list[CompositeHandle]:
    """Participant handles grouped by the composite Xid they name; a non-Xid stands alone as
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
    """*fn* of every item, all tried; then the first error raised."""
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
