"""The two-phase-commit sink contract."""

from __future__ import annotations

import enum
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeAlias, TypeVar

from ._context import TransactionContext
from ._errors import ConfigurationError, SinkError
from ._handle import TransactionHandle
from ._inspect import Headroom, PreparedDetail
from ._sink_id_record import OwnerRecord
from ._target_protocol import TargetLedger

if TYPE_CHECKING:
    from typing import Self

    import pyarrow as pa

__all__ = ["AnySink", "CommitOutcome", "CommitShape", "TwoPhaseCommitSink", "purge_markers_best_effort"]

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
    """How a sink commits the handles of one batch (:meth:`TwoPhaseCommitSink.commit_shape`):
    what the coordinator does with them."""

    PER_HANDLE = "per_handle"
    """Separately prepared transactions, committed after the decision is recorded: the
    coordinator commits the first, then (fault point ``between_commits``) the others, each
    group through :meth:`~TwoPhaseCommitSink.commit_all` when it answers, else one
    :meth:`~TwoPhaseCommitSink.commit` per handle. The default."""
    ONE_CALL = "one_call"
    """After the decision, :meth:`~TwoPhaseCommitSink.commit_all` gets every handle and
    makes them visible with one call of the target, all at once (``between_commits`` is
    never reached). Redis, one hash tag."""
    WHOLE_BATCH = "whole_batch"
    """After the decision, :meth:`~TwoPhaseCommitSink.commit_all` gets every handle in one
    call and orders the commits itself, firing ``between_commits`` between two of them.
    Redis across hash tags, :class:`~twopc.spi.CompositeSink`."""
    LOCAL_TRANSACTION = "local_transaction"
    """:meth:`~TwoPhaseCommitSink.commit_all` commits every handle in one local transaction
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
    after a restart), or :meth:`abort` / :meth:`recover_and_abort` for attempts Spark did
    not choose. :meth:`list_prepared` lets the runtime find prepared transactions whose
    handles never reached the driver (failed, retried or speculative attempts).

    Instances are built from Spark options by :meth:`from_options` and pickled to the
    executors: keep only plain configuration in attributes and open connections lazily.
    """

    handle_type: ClassVar[type[TransactionHandle]] = TransactionHandle
    #: Writer options this sink takes a session-wide default for: :func:`twopc.register`
    #: reads each from the Spark conf ``spark.twopc.<option>`` (:mod:`twopc._session_options`).
    session_options: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> Self:
        """Build the sink from Spark writer options (keys compared case-insensitively).

        Raises:
            ConfigurationError: an option is missing or invalid.
        """
        raise NotImplementedError(f"{cls.__qualname__} must implement from_options() to be used from Spark")

    @classmethod
    def reopen_options(cls, options: Mapping[str, str]) -> dict[str, str] | None:  # optional hook
        """The part of the writer *options* (the runtime's removed) that :meth:`from_options`
        needs to reach the same target again, **without any secret**: no password, no
        credential in a URL. The Spark runtime records it in the checkpoint with
        :meth:`target_identity`, so that ``twopc status``/``recover`` need only the secrets.
        Default ``None``: nothing is recorded (the operator gives every option)."""
        return None

    def validate(self, schema: pa.Schema) -> None:  # optional hook: a no-op by default
        """Check, on the driver before any task runs, that rows of *schema* can be written.

        Raises:
            ConfigurationError: the target is missing, misconfigured or does not fit
                *schema*. Nothing has been written when this raises.
            SinkUnavailableError: the target cannot be reached.
        """

    def configure_write(self, schema: pa.Schema, *, overwrite: bool, streaming: bool,
                        checkpointed: bool) -> None:
        """Tell the sink what kind of write it serves, before :meth:`validate`.

        The Spark runtime calls this in every process that builds a writer (on the driver
        at plan time, and again in a streaming query's commit process), so it must depend
        only on its arguments and the options: no server contact. *overwrite* is Spark's
        overwrite flag (``mode("overwrite")``, ``outputMode("complete")``); *checkpointed*
        says whether the write has a ``checkpointLocation`` for the commit ledger.

        The default refuses overwrite.

        Raises:
            ConfigurationError: the sink cannot serve this kind of write.
        """
        if overwrite:
            how = 'outputMode("append")' if streaming else 'mode("append")'
            raise ConfigurationError(f"{type(self).__name__} does not support overwrite/complete mode: use {how}")

    def commit_shape(self, handles: Sequence[H] = ()) -> CommitShape:
        """How :meth:`commit_all` commits *handles* (the handles of one batch), which tells
        the coordinator what to do with them (see :class:`CommitShape`). Asked without
        handles, on the driver at plan time: how this write commits its batches, as
        configured so far (no server contact). Default ``PER_HANDLE``."""
        return CommitShape.PER_HANDLE

    def commit_may_be_refused(self) -> str | None:
        """Why the target of this write may refuse, for good, to commit a transaction that
        :meth:`pre_commit` returned (a constraint it checks only at commit), or ``None``
        when such a commit can fail only while the target is unreachable. Asked on the
        driver after :meth:`configure_write` and :meth:`validate`: a composite admits only
        participants that answer ``None``, because it records its one decision before any
        target commits. Default ``None`` (the contract: a prepared transaction commits)."""
        return None

    def before_decision(self, batch_id: int, handles: Sequence[H]) -> Sequence[H]:
        """The handles the decision of batch *batch_id* names, given the attempts Spark
        chose (optional hook: *handles* as they are, by default). Called on the driver
        right before the decision is recorded, for batches not committed atomically. A sink
        may prepare one more transaction here that holds some attempts' effects and return
        its handle instead of theirs (``twopc-jdbc`` moves the rows its tasks staged for
        want of a prepared-transaction slot into one): the attempts no longer named are
        then rolled back as leftovers after the commit. What it prepares must be listed by
        :meth:`list_prepared`, so that recovery rolls it back when no decision names it.

        Raises:
            SinkError: it could not prepare; the batch fails undecided.
        """
        return handles

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
        """Roll back a prepared transaction. Idempotent: a handle that is already gone is
        fine.

        Raises:
            ProtocolError: the transaction had been committed.
            SinkError: the target failed.
        """

    def commit_all(self, handles: Sequence[H], *, recovering: bool = False) -> list[CommitOutcome] | None:
        """Commit every handle of one decided batch together, or return ``None`` (the
        default) to have the coordinator call :meth:`commit` per handle.

        Sinks that can make a whole batch visible at once override it (and
        :meth:`commit_shape`). Same contract as :meth:`commit`, per handle and
        in order; idempotent as a whole.

        Raises:
            SinkError: the target failed; nothing changed and the call can be retried.
        """
        return None

    def recover_and_commit(self, handle: H) -> CommitOutcome:
        """Commit a handle read back from the ledger after a restart. Same contract as
        :meth:`commit`; the common case is ``ALREADY_COMMITTED``."""
        return self.commit(handle)

    def recover_and_abort(self, handle: H) -> None:
        """Roll back a handle found after a restart. Same contract as :meth:`abort`."""
        self.abort(handle)

    @abstractmethod
    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> Sequence[H]:
        """Return the handles of every transaction of *sink_id* (and *batch_id*, when given)
        that is prepared and not yet committed or rolled back."""

    def prepared_details(self, sink_id: str) -> Sequence[PreparedDetail]:
        """What :meth:`list_prepared` finds for *sink_id*, with what the target can tell
        about each (its age and size). Read-only. The default wraps :meth:`list_prepared`
        and knows neither age nor size; sinks whose target records them override it.

        Raises:
            SinkError: the target failed.
        """
        return [PreparedDetail(h) for h in self.list_prepared(sink_id)]

    def headroom(self, sink_id: str) -> Headroom | None:
        """How many prepared transactions (or staged entries) the target holds now against
        its limit: for every user where the target has a shared limit (PostgreSQL's
        ``max_prepared_transactions``), else *sink_id*'s own where counting every user
        would be costly; ``None`` (the default) when the sink cannot tell. Read-only.

        Raises:
            SinkError: the target failed.
        """
        return None

    def target_ledger(self) -> TargetLedger | None:
        """Where this sink's server can keep the commit ledger and the writers' leases (see
        :mod:`twopc._target`), or ``None`` (the default). A sink that offers one can serve
        batch writes without ``checkpointLocation`` in its prepared mode, and every write
        through it resolves the abandoned writes of others on its server. No server contact."""
        return None

    def commit_mode(self) -> str:
        """How this sink commits, in one line for the start-up log (credential-free):
        the default names the class and whether a batch commits in one local transaction."""
        local = self.commit_shape() is CommitShape.LOCAL_TRANSACTION
        how = "one local transaction per batch" if local else "a prepared transaction per task"
        return f"{type(self).__name__}: {how}"

    def purge_markers(self, sink_id: str, below_batch: int) -> int:
        """Delete the commit markers (or other bookkeeping) of *sink_id*'s batches
        ``< below_batch``; return how many. Called when the ledger purges those batches:
        they can no longer be replayed, so "already committed" need not be answerable for
        them. The runtime calls it best effort (:func:`purge_markers_best_effort`).
        Default: the sink keeps none, 0.

        Raises:
            SinkError: the target failed.
        """
        return 0

    def claim_sink_id(self, sink_id: str, owner: str) -> OwnerRecord | None:
        """Record in the target, once, that *sink_id* is written by the query whose
        checkpoint is *owner* (a credential-free label); what is recorded is never changed.
        Asked on the driver at plan time, after :meth:`validate` and before recovery
        touches anything, for a ``sinkId`` the user gave (a derived one is unique to its
        checkpoint). The Spark runtime refuses the write with
        :class:`~twopc.spi.ConcurrentWriterError` when another owner is recorded: its recovery
        would roll back that query's transactions as orphans.

        Returns:
            ``None`` when the record names *owner* (now or already); the record of the
            other owner otherwise. Default ``None``: the sink keeps no owner record (the SQL
            sinks hold a lease on their server instead, :class:`~twopc.spi.TargetLedger`).

        Raises:
            SinkError / SinkUnavailableError: the target failed.
        """
        return None

    def target_identity(self) -> str | None:
        """What this sink writes to, as one credential-free line that stays the same for
        every write to the same target (SQL: dialect, host, port, database and table; Redis:
        server, database and key templates; files: the folder). The Spark runtime records it
        in the ledger the first time a checkpoint is used and refuses a write whose target
        differs (:meth:`CommitLedger.bind_target`): a checkpoint's committed batch ids and
        sink id describe one target only. Default ``None``: the sink cannot tell, nothing is
        checked."""
        return None

    def target_instance(self) -> str | None:
        """What the target itself says it is, asked from the server, in one credential-free
        line that includes what :meth:`target_identity` names inside it (the table, the
        keys): the same through every name of the same server (``localhost``, an IP address,
        another DNS alias), different for another server even behind the same URL. The ledger
        compares it with the one it recorded when both are known, else the
        :meth:`target_identity` lines (:meth:`CommitLedger.bind_target`). Called on the
        driver. Default ``None``: the sink cannot tell. It never raises: a server that does not
        answer gives ``None``."""
        return None

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


AnySink: TypeAlias = TwoPhaseCommitSink[Any, Any, Any]
"""A sink of any value, transaction and handle types (what the protocol's drivers take)."""


def purge_markers_best_effort(sink: AnySink, sink_id: str, below_batch: int) -> None:
    """The runtime's call of :meth:`TwoPhaseCommitSink.purge_markers`: best effort (the
    batch being committed is already committed and marked, so a :class:`SinkError` is
    logged, not raised: the next purge retries)."""
    try:
        removed = sink.purge_markers(sink_id, below_batch)
    except SinkError as exc:
        log.warning("twopc: %s could not purge the markers of sink %s below batch %s (the next purge "
                    "retries): %s", sink.describe(), sink_id, below_batch, exc)
        return
    log.debug("twopc: %s purged %s markers of sink %s below batch %s", sink.describe(), removed, sink_id,
              below_batch)
