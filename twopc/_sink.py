"""The two-phase-commit sink contract: :class:`TwoPhaseCommitSink`, the twelve methods every sink
implements, and the optional capabilities the runtime finds with ``isinstance``."""

from __future__ import annotations

import enum
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeAlias, TypeVar, cast, runtime_checkable

from ._context import TransactionContext
from ._errors import ConfigurationError, ProtocolError, SinkError
from ._handle import TransactionHandle
from .ledger._target_protocol import TargetLedger

if TYPE_CHECKING:
    from typing import Self

    import pyarrow as pa

    from ._inspect import Headroom, PreparedDetail
    from ._sink_id_record import OwnerRecord

__all__ = ["AnySink", "BatchCommit", "CommitOutcome", "CommitShape", "DecisionHook", "Inspectable", "LedgerHost",
           "MarkerPurge", "NamedTarget", "TwoPhaseCommitSink", "WriteSetup", "capability", "commit_handles",
           "purge_markers_best_effort", "refuse_overwrite"]

log = logging.getLogger("twopc.sink")

V = TypeVar("V")
T = TypeVar("T")
H = TypeVar("H", bound=TransactionHandle)


class CommitOutcome(enum.Enum):
    """What a commit request found (after Flink Sink V2's committer outcomes)."""

    COMMITTED = "committed"
    """The prepared transaction was committed by this call."""
    ALREADY_COMMITTED = "already_committed"
    """It had been committed before (a replay); nothing changed."""
    LOST = "lost"
    """It is neither prepared nor committed: its effects are gone. The caller raises."""


class CommitShape(enum.Enum):
    """How a sink commits the handles of one batch (:meth:`BatchCommit.commit_shape`):
    what the coordinator does with them."""

    PER_HANDLE = "per_handle"
    """Separately prepared transactions, committed after the decision is recorded: the
    coordinator commits the first, then (fault point ``between_commits``) the others, each
    group through :meth:`~BatchCommit.commit_all` when it answers, else one
    :meth:`~TwoPhaseCommitSink.commit` per handle. The default."""
    ONE_CALL = "one_call"
    """After the decision, :meth:`~BatchCommit.commit_all` gets every handle and
    makes them visible with one call of the target, all at once (``between_commits`` is
    never reached). Redis, one hash tag."""
    WHOLE_BATCH = "whole_batch"
    """After the decision, :meth:`~BatchCommit.commit_all` gets every handle in one
    call and orders the commits itself, firing ``between_commits`` between two of them.
    Redis across hash tags, :class:`~twopc.spi.runtime.CompositeSink`."""
    LOCAL_TRANSACTION = "local_transaction"
    """:meth:`~BatchCommit.commit_all` commits every handle in one local transaction
    of the target that decides by itself: the coordinator commits *before* it records the
    batch, so a commit the target refuses leaves nothing decided, and a batch write needs
    no durable ledger (it may omit ``checkpointLocation``). The sink's batch marker answers
    a replay ``ALREADY_COMMITTED``. The staging sinks."""


class TwoPhaseCommitSink(ABC, Generic[V, T, H]):
    """A sink whose writes become visible all at once, exactly once.

    Type parameters: ``V`` the value :meth:`invoke` takes (a row as a ``dict`` for the
    built-in sinks), ``T`` the open-transaction object (process-local, never serialized),
    ``H`` the :class:`TransactionHandle` subclass :meth:`pre_commit` returns.

    Life of one task attempt's transaction (executor side)::

        txn = sink.begin_transaction(ctx)
        sink.invoke_batch(txn, batch)     # any number of times
        handle = sink.pre_commit(txn)     # durable, invisible, committable from anywhere
        # or, on any failure before pre_commit returns: sink.rollback(txn)

    Then, on the driver, after the handles were recorded in the commit ledger:
    :meth:`commit` (or :meth:`recover_and_commit` for a handle read back from the ledger
    after a restart), or :meth:`abort` for attempts Spark did not choose and orphans.
    :meth:`list_prepared` lets the runtime find prepared transactions whose handles never
    reached the driver (failed, retried or speculative attempts).

    This class is the whole contract a sink must fulfil. What the runtime may use beyond it
    is an optional *capability*, a small protocol a sink implements by defining its methods
    (:class:`WriteSetup`, :class:`BatchCommit`, :class:`DecisionHook`, :class:`Inspectable`,
    :class:`MarkerPurge`, :class:`NamedTarget`, :class:`LedgerHost`); the runtime finds them
    with ``isinstance`` and does without them otherwise (:func:`capability`).

    Instances are built from Spark options by :meth:`from_options` and pickled to the
    executors: keep only plain configuration in attributes and open connections lazily.
    """

    #: The :class:`TransactionHandle` subclass :meth:`pre_commit` returns: the runtime registers
    #: it in every process that decodes this sink's handles. A class attribute the runtime reads,
    #: named as a dunder so that the sink's public names are the contract's methods alone.
    __handle_type__: ClassVar[type[TransactionHandle]] = TransactionHandle
    #: Writer options this sink takes a session-wide default for: :func:`twopc.register`
    #: reads each from the Spark conf ``spark.twopc.<option>`` (:mod:`twopc.spark._session_options`).
    __session_options__: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse a sink class that defines part of a capability without having it: the
        runtime, which finds capabilities with ``isinstance``, would not see those methods.

        Refuse too a sink class that sets ``handle_type`` or ``session_options``, the names these
        two class attributes had before 0.2.0: the runtime reads :attr:`__handle_type__` and
        :attr:`__session_options__`, and would silently use the defaults.

        Raises:
            TypeError: naming the capability to subclass, or the attribute to rename.
        """
        super().__init_subclass__(**kwargs)
        renamed = [f"{cls.__qualname__} sets {old}: twopc reads it as {new} since 0.2.0 (rename the class "
                   f"attribute to {new})" for old, new in RENAMED_ATTRIBUTES.items() if old in vars(cls)]
        half = renamed + half_capabilities(cls)
        if half:
            raise TypeError("; ".join(half))

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> Self:
        """Build the sink from Spark writer options (keys compared case-insensitively).

        Raises:
            ConfigurationError: an option is missing or invalid.
        """
        raise NotImplementedError(f"{cls.__qualname__} must implement from_options() to be used from Spark")

    @abstractmethod
    def begin_transaction(self, context: TransactionContext) -> T:
        """Open the transaction of one task attempt."""

    @abstractmethod
    def invoke(self, txn: T, value: V) -> None:
        """Add one value to the open transaction."""

    def invoke_batch(self, txn: T, batch: pa.RecordBatch) -> None:
        """Add an Arrow record batch. The default calls :meth:`invoke` per row as a dict;
        sinks override it to load whole batches without per-row Python objects."""
        for row in batch.to_pylist():
            self.invoke(txn, row)

    @abstractmethod
    def pre_commit(self, txn: T) -> H:
        """Make the transaction durable but invisible, and return its handle.

        After this returns, the transaction survives a crash of this process and of the
        target, and can be committed or rolled back from any process with the handle.
        """

    @abstractmethod
    def rollback(self, txn: T) -> None:
        """Discard an open transaction that was not prepared. Must not raise for one that
        is already gone."""

    @abstractmethod
    def commit(self, handle: H) -> CommitOutcome:
        """Commit a prepared transaction. Idempotent.

        Returns:
            ``COMMITTED`` when this call committed it, ``ALREADY_COMMITTED`` when it had
            been committed before, ``LOST`` when it is neither prepared nor committed.

        Raises:
            SinkError: the target failed; the transaction is unchanged and the call can
                be retried.
        """

    @abstractmethod
    def abort(self, handle: H) -> None:
        """Roll back a prepared transaction, from any process (a handle read back after a
        restart, an orphan). Idempotent: a handle that is already gone is fine.

        Raises:
            ProtocolError: the transaction had been committed.
            SinkError: the target failed.
        """

    def recover_and_commit(self, handle: H) -> CommitOutcome:
        """Commit a handle read back from the ledger after a restart. Same contract as
        :meth:`commit`; the common case is ``ALREADY_COMMITTED``."""
        return self.commit(handle)

    @abstractmethod
    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> Sequence[H]:
        """Return the handles of every transaction of *sink_id* (and *batch_id*, when given)
        that is prepared and not yet committed or rolled back."""

    def describe(self) -> str:
        """A one-line, credential-free description used in logs and reports."""
        return type(self).__qualname__

    def __repr__(self) -> str:
        """``ClassName(<describe()>)``: credential-free like :meth:`describe`."""
        return f"{type(self).__name__}({self.describe()})"

    def close(self) -> None:  # optional hook: a no-op by default
        """Release connections. The sink stays usable: connections reopen lazily."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


#: The class attributes of :class:`TwoPhaseCommitSink` renamed in 0.2.0: old name -> new name.
RENAMED_ATTRIBUTES: Mapping[str, str] = {"handle_type": "__handle_type__", "session_options": "__session_options__"}

AnySink: TypeAlias = TwoPhaseCommitSink[Any, Any, Any]
"""A sink of any value, transaction and handle types (what the protocol's drivers take)."""


# -- capabilities: what the runtime may use beyond the contract ---------------------------------

@runtime_checkable
class WriteSetup(Protocol):
    """A sink that is told what kind of write it serves and checks its target before any task
    runs (on the driver, at plan time)."""

    def configure_write(self, schema: pa.Schema, *, overwrite: bool, streaming: bool, checkpointed: bool) -> None:
        """Tell the sink what kind of write it serves, before :meth:`validate`. Called in every
        process that builds a writer (at plan time, and in a streaming query's commit
        process), so it depends only on its arguments and the options: no server contact.
        *overwrite* is Spark's overwrite flag (``mode("overwrite")``, ``outputMode("complete")``);
        *checkpointed* says whether the write has a ``checkpointLocation``. Without this
        capability an overwrite is refused.

        Raises:
            ConfigurationError: the sink cannot serve this kind of write.
        """
        refuse_overwrite(self, overwrite=overwrite, streaming=streaming)

    def validate(self, schema: pa.Schema) -> None:
        """Check, before any task runs, that rows of *schema* can be written.

        Raises:
            ConfigurationError: the target is missing, misconfigured or does not fit
                *schema*. Nothing has been written when this raises.
            SinkUnavailableError: the target cannot be reached.
        """
        return None

    def commit_may_be_refused(self) -> str | None:
        """Why the target may refuse, for good, to commit a transaction :meth:`pre_commit`
        returned (a constraint it checks only at commit), or ``None``. A composite admits
        only participants that answer ``None`` (it records its one decision before any
        target commits). Without this capability: ``None``."""
        return None

    def commit_mode(self) -> str:
        """How this sink commits, in one line for the start-up log (credential-free)."""
        return _commit_mode(self)


@runtime_checkable
class BatchCommit(Protocol):
    """A sink that commits the handles of one batch together (see :class:`CommitShape`)."""

    def commit_shape(self, handles: Sequence[Any] = ()) -> CommitShape:
        """How :meth:`commit_all` commits *handles* (one batch's); asked without handles at
        plan time: how this write commits its batches (no server contact)."""
        return CommitShape.PER_HANDLE

    def commit_all(self, handles: Sequence[Any], *, recovering: bool = False) -> list[CommitOutcome] | None:
        """Commit every handle of one decided batch together, per :meth:`commit`'s contract
        and in order, idempotent as a whole; ``None`` has the runtime commit one by one.

        Raises:
            SinkError: the target failed; nothing changed and the call can be retried.
        """
        return None


@runtime_checkable
class DecisionHook(Protocol):
    """A sink that may replace some attempts' handles right before the decision."""

    def before_decision(self, batch_id: int, handles: Sequence[Any]) -> Sequence[Any]:
        """The handles the decision of *batch_id* names, given the attempts Spark chose. A
        sink may prepare one more transaction here that holds some attempts' effects and
        return its handle instead of theirs (``twopc-jdbc`` moves the rows its tasks staged
        for want of a prepared-transaction slot into one): the attempts no longer named are
        rolled back after the commit. What it prepares must be listed by
        :meth:`~TwoPhaseCommitSink.list_prepared`.

        Raises:
            SinkError: it could not prepare; the batch fails undecided.
        """
        return handles


@runtime_checkable
class Inspectable(Protocol):
    """A sink whose target can tell ``twopc status`` and the metrics more than the contract."""

    def prepared_details(self, sink_id: str) -> Sequence[PreparedDetail]:
        """What :meth:`~TwoPhaseCommitSink.list_prepared` finds for *sink_id*, with its age
        and size. Read-only.

        Raises:
            SinkError: the target failed.
        """
        from ._inspect import PreparedDetail  # twopc status's: a write's workers never build one

        return [PreparedDetail(h) for h in cast(AnySink, self).list_prepared(sink_id)]

    def headroom(self, sink_id: str) -> Headroom | None:
        """How many prepared transactions (or staged entries) the target holds against its
        limit, ``None`` when it cannot tell. Read-only.

        Raises:
            SinkError: the target failed.
        """
        return None


@runtime_checkable
class MarkerPurge(Protocol):
    """A sink that keeps per-batch bookkeeping (commit markers) in its target."""

    def purge_markers(self, sink_id: str, below_batch: int) -> int:
        """Delete the markers of *sink_id*'s batches ``< below_batch``; return how many. The
        runtime calls it when the ledger forgets those batches, best effort.

        Raises:
            SinkError: the target failed.
        """
        return 0


@runtime_checkable
class NamedTarget(Protocol):
    """A sink that can name what it writes to, reach it again from the checkpoint, and record
    there which query owns a sink id."""

    def target_identity(self) -> str | None:
        """What this sink writes to, in one credential-free line that stays the same for
        every write to the same target (SQL: dialect, host, port, database and table).
        The runtime records it with a checkpoint's first write and refuses another target
        later (:meth:`~twopc.CommitLedger.bind_target`)."""
        return None

    def target_instance(self) -> str | None:
        """What the target's server says it is (the same through every name of the server,
        another for another server), asked on the driver; ``None`` when it cannot tell.
        Never raises."""
        return None

    def reopen_options(self, options: Mapping[str, str]) -> dict[str, str] | None:
        """The writer *options* that reach the same target again, without any secret: the
        runtime records them, so that ``twopc status``/``recover`` need only the secrets."""
        return None

    def claim_sink_id(self, sink_id: str, owner: str) -> OwnerRecord | None:
        """Record in the target, once, that *sink_id* is written by the query whose
        checkpoint is *owner*; return ``None`` when the record names *owner*, else the
        other owner's record (the runtime then refuses the write with
        :class:`~twopc.spi.ConcurrentWriterError`). For sinks without a lease on a server.

        Raises:
            SinkError / SinkUnavailableError: the target failed.
        """
        return None


@runtime_checkable
class LedgerHost(Protocol):
    """A sink whose server can keep the commit ledger and the writers' leases (batch writes
    without ``checkpointLocation``; see :mod:`twopc._target`)."""

    def target_ledger(self) -> TargetLedger | None:
        """The server's ledger and leases, or ``None``. No server contact."""
        return None


CAPABILITIES: tuple[type, ...] = (WriteSetup, BatchCommit, DecisionHook, Inspectable, MarkerPurge, NamedTarget,
                                  LedgerHost)
"""Every optional capability, in the order the docs list them."""


def _commit_mode(sink: object) -> str:
    local = capability(sink, BatchCommit).commit_shape() is CommitShape.LOCAL_TRANSACTION
    how = "one local transaction per batch" if local else "a prepared transaction per task"
    return f"{type(sink).__name__}: {how}"


def half_capabilities(cls: type) -> list[str]:
    """The capabilities *cls* defines some methods of without having them all (it neither
    subclasses the capability, which supplies the defaults of the others, nor defines the
    rest): the runtime would not see the methods it defines. One line per capability."""
    found = []
    for kind in CAPABILITIES:
        names = {n for n, v in vars(kind).items() if callable(v) and not n.startswith("_")}
        have = {n for n in names if any(n in vars(c) for c in cls.__mro__ if c not in (object, kind))}
        if have and have != names and not issubclass(cls, kind):
            found.append(f"{cls.__qualname__} defines {', '.join(sorted(have))} of {kind.__name__} but not "
                         f"{', '.join(sorted(names - have))}: subclass twopc.spi.{kind.__name__} (its other "
                         f"methods then have their defaults) or define them")
    return found


class _Defaults(WriteSetup, BatchCommit, DecisionHook, Inspectable, MarkerPurge, NamedTarget, LedgerHost):
    """What the runtime does for a sink without a capability (see :func:`capability`): each
    capability's defaults, on behalf of the sink."""

    def __init__(self, sink: AnySink) -> None:
        self._sink = sink

    def configure_write(self, schema: pa.Schema, *, overwrite: bool, streaming: bool, checkpointed: bool) -> None:
        refuse_overwrite(self._sink, overwrite=overwrite, streaming=streaming)

    def commit_mode(self) -> str:
        return _commit_mode(self._sink)

    def prepared_details(self, sink_id: str) -> Sequence[PreparedDetail]:
        from ._inspect import PreparedDetail  # as in Inspectable.prepared_details

        return [PreparedDetail(h) for h in self._sink.list_prepared(sink_id)]


def refuse_overwrite(sink: object, *, overwrite: bool, streaming: bool) -> None:
    """Refuse an overwrite (``mode("overwrite")``, ``outputMode("complete")``) for *sink*, which
    only appends (what a sink without :class:`WriteSetup` gets).

    Raises:
        ConfigurationError: *overwrite*, naming the mode to use.
    """
    if overwrite:
        how = 'outputMode("append")' if streaming else 'mode("append")'
        raise ConfigurationError(f"{type(sink).__name__} does not support overwrite/complete mode: use {how}")


C = TypeVar("C")


def capability(sink: object, kind: type[C]) -> C:
    """*sink* itself when it has the capability *kind* (one of this module's protocols),
    else what the runtime does without it: a sink that does not say how it commits commits
    handle by handle, one that cannot name its target names none, and so on."""
    if isinstance(sink, kind):
        return sink
    return cast(C, _Defaults(cast(AnySink, sink)))


def commit_handles(sink: AnySink, handles: Sequence[TransactionHandle], *, recovering: bool) -> list[CommitOutcome]:
    """Commit one decided batch's *handles* through :meth:`BatchCommit.commit_all`, else one
    by one (:meth:`~TwoPhaseCommitSink.recover_and_commit` when *recovering*).

    Raises:
        ProtocolError: ``commit_all`` answered another number of outcomes than handles.
    """
    outcomes = capability(sink, BatchCommit).commit_all(handles, recovering=recovering) if handles else []
    if outcomes is None:
        return [sink.recover_and_commit(h) if recovering else sink.commit(h) for h in handles]
    if len(outcomes) != len(handles):
        raise ProtocolError(f"{sink.describe()}: commit_all returned {len(outcomes)} outcomes "
                            f"for {len(handles)} handles")
    return outcomes


def purge_markers_best_effort(sink: AnySink, sink_id: str, below_batch: int) -> None:
    """The runtime's call of :meth:`MarkerPurge.purge_markers`: best effort (the
    batch being committed is already committed and marked, so a :class:`SinkError` is
    logged, not raised: the next purge retries)."""
    try:
        removed = capability(sink, MarkerPurge).purge_markers(sink_id, below_batch)
    except SinkError as exc:
        log.warning("twopc: %s could not purge the markers of sink %s below batch %s (the next purge "
                    "retries): %s", sink.describe(), sink_id, below_batch, exc)
        return
    log.debug("twopc: %s purged %s markers of sink %s below batch %s", sink.describe(), removed, sink_id,
              below_batch)
