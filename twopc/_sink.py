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
    """How a sink commits one batch's handles (:meth:`BatchCommit.commit_shape`)."""

    PER_HANDLE = "per_handle"
    """The default: after the decision the first handle is committed, then (fault point
    ``between_commits``) the others, through :meth:`~BatchCommit.commit_all` or one by one."""
    ONE_CALL = "one_call"
    """After the decision, :meth:`~BatchCommit.commit_all` makes every handle visible in one
    target call (``between_commits`` never fires). Redis, one hash tag."""
    WHOLE_BATCH = "whole_batch"
    """After the decision, :meth:`~BatchCommit.commit_all` orders the commits itself and fires
    ``between_commits``. Redis across hash tags, :class:`~twopc.spi.runtime.CompositeSink`."""
    LOCAL_TRANSACTION = "local_transaction"
    """:meth:`~BatchCommit.commit_all` commits in one local transaction *before* the batch is
    recorded, so a refused commit decides nothing and no durable ledger is needed (no
    ``checkpointLocation``); the batch marker answers a replay. The staging sinks."""


class TwoPhaseCommitSink(ABC, Generic[V, T, H]):
    """A sink whose writes become visible all at once, exactly once.

    ``V`` is the value :meth:`invoke` takes (a row ``dict`` for the built-in sinks), ``T`` the
    process-local open transaction, ``H`` the :class:`TransactionHandle` :meth:`pre_commit` returns.
    One task attempt (executor side)::

        txn = sink.begin_transaction(ctx)
        sink.invoke_batch(txn, batch)     # any number of times
        handle = sink.pre_commit(txn)     # durable, invisible, committable from anywhere
        # or, on any failure before pre_commit returns: sink.rollback(txn)

    On the driver, once the ledger records the handles: :meth:`commit` (:meth:`recover_and_commit` after a restart)
    or :meth:`abort` (attempts Spark did not choose, orphans found by :meth:`list_prepared`). Optional capabilities
    (:class:`WriteSetup`, :class:`BatchCommit`, :class:`DecisionHook`, :class:`Inspectable`, :class:`MarkerPurge`,
    :class:`NamedTarget`, :class:`LedgerHost`) are found with ``isinstance`` (:func:`capability`).

    Instances are pickled to the executors: keep plain configuration in attributes and open connections lazily."""

    #: The :class:`TransactionHandle` subclass :meth:`pre_commit` returns (registered wherever
    #: handles are decoded); a dunder so the sink's public names are the contract's alone.
    __handle_type__: ClassVar[type[TransactionHandle]] = TransactionHandle
    #: Writer options with a session-wide default ``spark.twopc.<option>`` (:func:`twopc.register`).
    __session_options__: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse a class that defines part of a capability without having it (``isinstance`` would not
        see it), or sets ``handle_type``/``session_options`` (renamed in 0.2.0: silently ignored).
        Raises TypeError: naming the capability to subclass, or the attribute to rename."""
        super().__init_subclass__(**kwargs)
        renamed = [f"{cls.__qualname__} sets {old}: twopc reads it as {new} since 0.2.0 (rename the class "
                   f"attribute to {new})" for old, new in RENAMED_ATTRIBUTES.items() if old in vars(cls)]
        if half := renamed + half_capabilities(cls):
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
        """Add an Arrow record batch (default: :meth:`invoke` per row as a dict)."""
        for row in batch.to_pylist():
            self.invoke(txn, row)

    @abstractmethod
    def pre_commit(self, txn: T) -> H:
        """Make the transaction durable but invisible, and return its handle: it survives a crash of
        this process and of the target, and any process with the handle can commit or roll it back."""

    @abstractmethod
    def rollback(self, txn: T) -> None:
        """Discard an open, unprepared transaction; no error for one already gone."""

    @abstractmethod
    def commit(self, handle: H) -> CommitOutcome:
        """Commit a prepared transaction. Idempotent.

        Returns:
            ``COMMITTED`` (this call), ``ALREADY_COMMITTED`` (before), ``LOST`` (neither prepared
            nor committed).
        Raises SinkError: the target failed; the transaction is unchanged and the call can be retried."""

    @abstractmethod
    def abort(self, handle: H) -> None:
        """Roll back a prepared transaction from any process. Idempotent.
        Raises ProtocolError: the transaction had been committed.
        Raises SinkError: the target failed."""

    def recover_and_commit(self, handle: H) -> CommitOutcome:
        """:meth:`commit` for a handle read back after a restart (usually ``ALREADY_COMMITTED``)."""
        return self.commit(handle)

    @abstractmethod
    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> Sequence[H]:
        """The handles of *sink_id*'s (and *batch_id*'s) prepared, undecided transactions."""

    def describe(self) -> str:
        """A one-line, credential-free description used in logs and reports."""
        return type(self).__qualname__

    def __repr__(self) -> str:
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
    """A sink told what kind of write it serves, which checks its target at plan time."""

    def configure_write(self, schema: pa.Schema, *, overwrite: bool, streaming: bool, checkpointed: bool) -> None:
        """Tell the sink the kind of write, before :meth:`validate`, in every process that builds a
        writer: no server contact. *overwrite* is Spark's overwrite flag; *checkpointed* says whether
        there is a ``checkpointLocation``. Without this capability an overwrite is refused.

        Raises:
            ConfigurationError: the sink cannot serve this kind of write."""
        refuse_overwrite(self, overwrite=overwrite, streaming=streaming)

    def validate(self, schema: pa.Schema) -> None:
        """Check before any task runs that rows of *schema* can be written.

        Raises:
            ConfigurationError: the target is missing, misconfigured or does not fit *schema*.
            SinkUnavailableError: the target cannot be reached."""
        return None

    def commit_may_be_refused(self) -> str | None:
        """Why the target may refuse for good to commit a prepared transaction, or ``None``. A
        composite admits only participants answering ``None`` (it decides before any target commits)."""
        return None

    def commit_mode(self) -> str:
        """How this sink commits, in one credential-free line for the start-up log."""
        return _commit_mode(self)


@runtime_checkable
class BatchCommit(Protocol):
    """A sink that commits the handles of one batch together (see :class:`CommitShape`)."""

    def commit_shape(self, handles: Sequence[Any] = ()) -> CommitShape:
        """How :meth:`commit_all` commits *handles*; without handles (plan time, no server contact):
        how this write commits its batches."""
        return CommitShape.PER_HANDLE

    def commit_all(self, handles: Sequence[Any], *, recovering: bool = False) -> list[CommitOutcome] | None:
        """Commit one decided batch's handles together, per :meth:`commit`'s contract, in order,
        idempotent as a whole; ``None`` has the runtime commit one by one.

        Raises:
            SinkError: the target failed; nothing changed and the call can be retried."""
        return None


@runtime_checkable
class DecisionHook(Protocol):
    """A sink that may replace some attempts' handles right before the decision."""

    def before_decision(self, batch_id: int, handles: Sequence[Any]) -> Sequence[Any]:
        """The handles the decision of *batch_id* names. A sink may prepare one more transaction holding
        some attempts' effects and name it instead (``twopc-jdbc`` does for rows staged for want of a
        prepared-transaction slot); attempts no longer named are rolled back after the commit. It must
        be listed by :meth:`~TwoPhaseCommitSink.list_prepared`.

        Raises:
            SinkError: it could not prepare; the batch fails undecided."""
        return handles


@runtime_checkable
class Inspectable(Protocol):
    """A sink whose target can tell ``twopc status`` and the metrics more than the contract."""

    def prepared_details(self, sink_id: str) -> Sequence[PreparedDetail]:
        """:meth:`~TwoPhaseCommitSink.list_prepared` for *sink_id* with age and size. Read-only.

        Raises:
            SinkError: the target failed."""
        from ._inspect import PreparedDetail  # twopc status's: a write's workers never build one
        return [PreparedDetail(h) for h in cast(AnySink, self).list_prepared(sink_id)]

    def headroom(self, sink_id: str) -> Headroom | None:
        """Prepared transactions (or staged entries) held against the target's limit, ``None`` when
        unknown. Read-only.

        Raises:
            SinkError: the target failed."""
        return None


@runtime_checkable
class MarkerPurge(Protocol):
    """A sink that keeps per-batch bookkeeping (commit markers) in its target."""

    def purge_markers(self, sink_id: str, below_batch: int) -> int:
        """Delete *sink_id*'s markers of batches ``< below_batch`` (best effort, when the ledger forgets
        them); return how many.

        Raises:
            SinkError: the target failed."""
        return 0


@runtime_checkable
class NamedTarget(Protocol):
    """A sink that names its target, reopens it from the checkpoint and records there who owns a sink id."""

    def target_identity(self) -> str | None:
        """The target in one stable credential-free line (SQL: dialect, host, port, database, table), recorded with a
        checkpoint's first write; another target is refused later (:meth:`~twopc.CommitLedger.bind_target`)."""
        return None

    def target_instance(self) -> str | None:
        """What the target's server says it is (same through every name of it), or ``None``. Never raises."""
        return None

    def reopen_options(self, options: Mapping[str, str]) -> dict[str, str] | None:
        """The writer *options* that reach the target again, without secrets (for ``twopc status``/``recover``)."""
        return None

    def claim_sink_id(self, sink_id: str, owner: str) -> OwnerRecord | None:
        """Record once in the target that the query with checkpoint *owner* writes *sink_id*; ``None``
        when it does, else the other owner's record (the write is then refused with
        :class:`~twopc.spi.ConcurrentWriterError`). For sinks without a server lease.

        Raises:
            SinkError / SinkUnavailableError: the target failed."""
        return None


@runtime_checkable
class LedgerHost(Protocol):
    """A sink whose server can keep the ledger and leases (batch writes without ``checkpointLocation``)."""

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
    """One line per capability *cls* defines only some methods of without subclassing it."""
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
    """Each capability's defaults, for a sink without it (see :func:`capability`)."""

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
    """Refuse an overwrite for *sink*, which only appends.
    Raises ConfigurationError: *overwrite*, naming the mode to use."""
    if overwrite:
        how = 'outputMode("append")' if streaming else 'mode("append")'
        raise ConfigurationError(f"{type(sink).__name__} does not support overwrite/complete mode: use {how}")


C = TypeVar("C")


def capability(sink: object, kind: type[C]) -> C:
    """*sink* itself when it has the capability *kind*, else the runtime's defaults for it."""
    return sink if isinstance(sink, kind) else cast(C, _Defaults(cast(AnySink, sink)))


def commit_handles(sink: AnySink, handles: Sequence[TransactionHandle], *, recovering: bool) -> list[CommitOutcome]:
    """Commit a decided batch's *handles* through :meth:`BatchCommit.commit_all`, else one by one.
    Raises ProtocolError: ``commit_all`` answered another number of outcomes than handles."""
    outcomes = capability(sink, BatchCommit).commit_all(handles, recovering=recovering) if handles else []
    if outcomes is None:
        return [sink.recover_and_commit(h) if recovering else sink.commit(h) for h in handles]
    if len(outcomes) != len(handles):
        raise ProtocolError(f"{sink.describe()}: commit_all returned {len(outcomes)} outcomes "
                            f"for {len(handles)} handles")
    return outcomes


def purge_markers_best_effort(sink: AnySink, sink_id: str, below_batch: int) -> None:
    """:meth:`MarkerPurge.purge_markers`, logging a :class:`SinkError` (the next purge retries)."""
    try:
        removed = capability(sink, MarkerPurge).purge_markers(sink_id, below_batch)
    except SinkError as exc:
        log.warning("twopc: %s could not purge the markers of sink %s below batch %s (the next purge "
                    "retries): %s", sink.describe(), sink_id, below_batch, exc)
        return
    log.debug("twopc: %s purged %s markers of sink %s below batch %s", sink.describe(), removed, sink_id,
              below_batch)
