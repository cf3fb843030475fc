"""Where a write keeps its decisions, chosen once at plan time on the driver (:func:`plan_write`):

- :func:`in_checkpoint`: the query's checkpoint folder (streaming, or ``checkpointLocation``);
- :func:`in_target`: the target's ledger table under the writer's lease (no checkpoint, a
  :class:`~twopc.spi.LedgerHost`, named by ``txnAppId`` or not committing in one local
  transaction; :mod:`twopc._target`);
- :func:`in_temp_folder`: a temporary driver folder deleted when the write ends (no checkpoint,
  one local transaction per batch; :mod:`twopc.ledger._ephemeral`).

Each binds the sink id (and lease), then runs the shared steps (:func:`_recover`); a failed
plan leaves nothing behind. Only the worker that plans a write loads this module."""

from __future__ import annotations

import dataclasses
import functools
import logging
import shutil
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar

from pyspark.sql.datasource import DataSourceStreamArrowWriter
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from .._logs import configure_worker_logging
from .._objpath import class_path
from .._runtime_options import RuntimeOptions, default_sink_id, ephemeral_sink_id, option, sink_options
from .._sink import AnySink, BatchCommit, CommitShape, LedgerHost, NamedTarget, WriteSetup, capability
from .._sink_id_claim import claim_sink_id
from .._target import open_target_ledger, settle_own
from .._worker_heap import note_worker_use
from ..ledger._agent_client import DriverAgent
from ..ledger._ephemeral import make_ephemeral_ledger, sweep_dead_ledgers
from ..ledger._ledger import CommitLedger, spark_checkpoint_started
from ..ledger._target_protocol import Lease, TargetLedger, target_ledger_of
from ..operations._abandoned import resolve_abandoned
from ..operations._recovery import RecoveryCoordinator
from ._checkpoint import missing_spark_checkpoint, with_checkpoint
from ._observe import at_plan_time
from ._session_options import with_session_defaults
from ._writer import WriterCore

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Plan", "Write", "in_checkpoint", "in_target", "in_temp_folder", "plan", "plan_write"]

log = logging.getLogger("twopc.spark")

W = TypeVar("W", bound=WriterCore)


class SourceToPlan(Protocol):
    """What the planner reads of the data source whose write it plans."""

    options: MutableMapping[str, str]
    sink_class: ClassVar[type[AnySink]]
    session_defaults: ClassVar[Mapping[str, str]]

    def name(self) -> str: ...

    def session_root(self) -> str | None: ...

    def build_sink(self, options: Mapping[str, str]) -> AnySink: ...


def plan(source: SourceToPlan, kind: type[W], schema: StructType, overwrite: bool, *, plan_time: bool) -> W:
    """The writer of *kind* for *source*'s write of *schema*: the sink built, configured and planned
    (*plan_time*: the plan-time instance; an unpickled copy recovers nothing)."""
    streaming = issubclass(kind, DataSourceStreamArrowWriter)
    options = with_checkpoint(source.options, streaming=streaming,
                              session_root=source.session_root() if streaming else None)
    options = _with_session_options(source, options)
    sink = source.build_sink(options)
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    checkpointed = bool(option(options, "checkpointLocation"))
    if plan_time and not checkpointed and not streaming:
        start_agent_early(sink, options, overwrite=overwrite)
    capability(sink, WriteSetup).configure_write(arrow_schema, overwrite=overwrite, streaming=streaming,
                                                 checkpointed=checkpointed)
    configure_worker_logging()
    note_worker_use()
    planned = plan_write(Write(sink, options, source.options, arrow_schema, streaming, plan_time, source.name(),
                               class_path(source.sink_class)))
    return kind(sink, planned.sink_id, planned.runtime, skip=planned.skip, format_name=source.name(),
                epoch=planned.epoch, lease=planned.lease, abort_baseline=planned.abort_baseline,
                committed_through=planned.committed_through,
                version=None if streaming else planned.runtime.txn_version)


def _with_session_options(source: SourceToPlan, options: dict[str, str]) -> dict[str, str]:
    """*options* with the session's defaults, pinned to what the checkpoint recorded."""
    if not (names := source.sink_class.__session_options__):
        return options
    location = option(options, "checkpointLocation")
    record = CommitLedger(location, read_only=True).target_record() if location else None
    return with_session_defaults(options, source.session_defaults, names, record.options if record else None,
                                 location)


@dataclass(frozen=True)
class Write:
    """One write to plan: *options* resolved, *given* as Spark gave them; not *plan_time* in the
    process committing a micro-batch, which recovers nothing (it would roll back its batch)."""

    sink: AnySink
    options: Mapping[str, str]
    given: Mapping[str, str]
    schema: pa.Schema
    streaming: bool
    plan_time: bool
    data_source: str
    sink_class: str


@dataclass(frozen=True)
class Plan:
    """What a write's writer is built from."""

    sink_id: str
    runtime: RuntimeOptions
    skip: bool = False
    epoch: int | None = None
    lease: Lease | None = None
    abort_baseline: frozenset[str] | None = None
    committed_through: int | None = None


def _decides_itself(sink: AnySink) -> bool:
    """Whether *sink* commits a batch in one local transaction (no durable ledger needed)."""
    return capability(sink, BatchCommit).commit_shape() is CommitShape.LOCAL_TRANSACTION


def _named(options: Mapping[str, str]) -> bool:
    """Whether the write is named (``txnAppId``): its decisions stay in the target's ledger whatever
    its commit mode, where a rerun that commits another way finds them."""
    return bool(option(options, "sinkId") or option(options, "txnAppId"))


def start_agent_early(sink: AnySink, options: Mapping[str, str], *, overwrite: bool) -> None:
    """Start the driver's agent while the sink validates, when a checkpoint-less batch write will
    likely keep its ledger in the target."""
    if isinstance(sink, LedgerHost) and (_named(options) or (not overwrite and not _decides_itself(sink))):
        DriverAgent().start()


def plan_write(write: Write) -> Plan:
    """Plan *write* where its decisions are kept."""
    sink = write.sink
    if write.streaming or option(write.options, "checkpointLocation") or not write.plan_time:
        return in_checkpoint(write)
    target = target_ledger_of(sink) if _named(write.options) or not _decides_itself(sink) else None
    if target is not None:
        capability(sink, WriteSetup).validate(write.schema)  # settles the commit mode (twopc-jdbc asks the server)
        if _named(write.options) or not _decides_itself(sink):
            return in_target(write, target)
    if _decides_itself(sink):
        return in_temp_folder(write, validated=target is not None)
    return in_checkpoint(write)  # refused: no checkpointLocation (RuntimeOptions.parse says how to give one)


def in_checkpoint(write: Write) -> Plan:
    """A ledger in the write's checkpoint folder."""
    runtime = RuntimeOptions.parse(write.options, streaming=write.streaming)
    location = runtime.checkpoint_location
    if write.plan_time and not option(write.given, "checkpointLocation") and not spark_checkpoint_started(location):
        raise missing_spark_checkpoint(location)
    ledger = CommitLedger(location)
    sink_id = ledger.bind_sink_id(runtime.sink_id, default_sink_id(location))
    if not write.plan_time:
        return Plan(sink_id, runtime)
    target = capability(write.sink, NamedTarget)
    identity = target.target_identity()
    leased = target_ledger_of(write.sink) if runtime.sink_id else None
    # a sink id given by the user may be given to two writers: the second one is refused here,
    # before its recovery would roll back the first one's transactions as orphans
    lease = leased.acquire(sink_id, keep=write.streaming) if leased is not None else None
    undo = functools.partial(leased.release, lease) if leased and lease and not write.streaming else None
    return _recover(write, runtime, ledger, sink_id, identity=identity, lease=lease, undo=undo,
                    instance=target.target_instance() if identity is not None else None,
                    claim_id=bool(runtime.sink_id) and lease is None)  # sinks without a lease


def in_target(write: Write, target: TargetLedger) -> Plan:
    """A ledger in the target's table (already validated)."""
    runtime = dataclasses.replace(RuntimeOptions.parse(write.options, streaming=False,
                                                       ephemeral_location=target.location), in_target=True)
    sink_id = runtime.sink_id or ephemeral_sink_id()
    lease = target.acquire(sink_id)  # before any record: a held lease is a live writer
    undo = functools.partial(settle_own, write.sink, target, sink_id, lease)
    try:
        ledger = open_target_ledger(target, sink_id)
        ledger.bind_sink_id(sink_id, sink_id)
    except BaseException:
        undo()
        raise
    log.info("twopc: sink %s keeps its ledger in %s (no checkpointLocation)", sink_id, target.location)
    return _recover(write, runtime, ledger, sink_id, validated=True, lease=lease, undo=undo)


def in_temp_folder(write: Write, *, validated: bool) -> Plan:
    """A ledger in a temporary driver folder (*validated*: the target already was)."""
    folder = make_ephemeral_ledger()
    undo = functools.partial(shutil.rmtree, folder, ignore_errors=True)
    try:
        runtime = RuntimeOptions.parse(write.options, streaming=False, ephemeral_location=folder)
        ledger = CommitLedger(folder)
        sink_id = ledger.bind_sink_id(runtime.sink_id, ephemeral_sink_id())
    except BaseException:
        undo()
        raise
    return _recover(write, runtime, ledger, sink_id, validated=validated, undo=undo)


def _recover(write: Write, runtime: RuntimeOptions, ledger: CommitLedger, sink_id: str, *, validated: bool = False,
             identity: str | None = None, instance: str | None = None, claim_id: bool = False,
             lease: Lease | None = None, undo: Callable[[], object] | None = None) -> Plan:
    """The plan-time steps of every place in order; on failure *undo* runs before the sink closes."""
    sink = write.sink
    try:
        # another target's checkpoint: touch nothing
        ledger.bind_target(identity, sink_id, record=False, instance=instance)
        # a micro-batch's plan continues its query's run: displaced by another actor, it stops
        epoch = ledger.claim(resume=write.streaming)
        if not validated:
            capability(sink, WriteSetup).validate(write.schema)
        if claim_id:
            claim_sink_id(sink, sink_id, runtime.checkpoint_location)
        # recorded once the target validated (not a typo), with what reaches it again (no secret)
        ledger.bind_target(identity, sink_id, instance=instance, data_source=write.data_source,
                           sink_class=write.sink_class,
                           options=capability(sink, NamedTarget).reopen_options(sink_options(write.options)))
        RecoveryCoordinator(sink, ledger, sink_id=sink_id, claimed=True).run()
        if not write.streaming and (others := target_ledger_of(sink)) is not None:
            resolve_abandoned(sink, others, skip=sink_id)
        sweep_dead_ledgers()  # after validate: a sink may still look a dead write's ledger up
        if not runtime.ephemeral:
            at_plan_time(sink, sink_id, ledger, write.given)
        baseline = ledger.abort_records()  # before any task of this run: see twopc._fence, window 2
    except BaseException:
        if undo is not None:
            undo()
        raise
    finally:
        sink.close()
    latest = ledger.latest_committed()
    if write.streaming:
        return Plan(sink_id, runtime, epoch=epoch, abort_baseline=baseline, committed_through=latest)
    assert runtime.txn_version is not None
    skip = latest is not None and runtime.txn_version <= latest
    if skip and runtime.txn_version == latest:  # a rerun of a committed job: what txnVersion is for
        log.info("twopc: sink %s already committed txnVersion %s: this rerun writes nothing", sink_id, latest)
    elif skip:  # a version counter that went back loses the new job's rows: the user should know
        log.warning("twopc: sink %s requested txnVersion %s, below the last one it committed (%s): this write "
                    "writes nothing. A new job needs a txnVersion above %s", sink_id, runtime.txn_version, latest,
                    latest)
    return Plan(sink_id, runtime, skip=skip, epoch=epoch, lease=lease, abort_baseline=baseline)
