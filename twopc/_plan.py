"""A write's plan, on the driver, once per micro-batch (or per batch write), before any task
(see :mod:`twopc._spark`): the options validated, the sink id bound and claimed, and recovery
run, so that no task meets a stale prepared transaction. Only the worker that plans a write
loads this module; the workers that run its tasks and commit it do not."""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Mapping, MutableMapping
from typing import Protocol

from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from ._abandoned import resolve_abandoned
from ._agent_client import DriverAgent
from ._checkpoint import (
    missing_spark_checkpoint,
    with_checkpoint,
)
from ._ephemeral import make_ephemeral_ledger, sweep_dead_ledgers
from ._ledger import CommitLedger, spark_checkpoint_started
from ._logs import configure_worker_logging
from ._objpath import class_path
from ._observe import at_plan_time
from ._recovery import RecoveryCoordinator
from ._runtime_options import RuntimeOptions, default_sink_id, ephemeral_sink_id, option, sink_options
from ._session_options import with_session_defaults
from ._sink import (
    AnySink,
    BatchCommit,
    CommitShape,
    LedgerHost,
    NamedTarget,
    WriteSetup,
    capability,
)
from ._sink_id_claim import claim_sink_id
from ._target import open_target_ledger, settle_own
from ._target_protocol import target_ledger_of
from ._writer import WriterCore

__all__ = ["SourceToPlan", "plan_write"]

log = logging.getLogger("twopc.spark")


class SourceToPlan(Protocol):
    """What the planner reads of the data source whose write it plans
    (:class:`twopc._spark.SourceToPlan`, which imports this module when it plans)."""

    @property
    def options(self) -> MutableMapping[str, str]: ...

    @property
    def sink_class(self) -> type[AnySink]: ...

    @property
    def session_defaults(self) -> Mapping[str, str]: ...

    def name(self) -> str: ...

    def session_root(self) -> str | None: ...

    def build_sink(self, options: Mapping[str, str]) -> AnySink: ...


def _decides_itself(sink: AnySink) -> bool:
    """Whether *sink* commits this write's batches in one local transaction that decides by
    itself (:attr:`CommitShape.LOCAL_TRANSACTION`): then a batch write needs no durable ledger."""
    return capability(sink, BatchCommit).commit_shape() is CommitShape.LOCAL_TRANSACTION


def _with_session_options(source: SourceToPlan, options: dict[str, str]) -> dict[str, str]:
    """*options* with the session's defaults, the sink's ``session_options`` pinned to
    what the write's checkpoint recorded (:func:`~twopc._session_options.with_session_defaults`)."""
    names = source.sink_class.session_options
    if not names:
        return options
    location = option(options, "checkpointLocation")
    record = CommitLedger(location, read_only=True).target_record() if location else None
    return with_session_defaults(options, source.session_defaults, names, record.options if record else None,
                                 location)


def plan_write(source: SourceToPlan, schema: StructType, overwrite: bool, *, streaming: bool,
               plan_time: bool) -> WriterCore:
    """The write *source* plans for *schema*: its sink built from the options, validated, its
    sink id bound and claimed, recovery run (*plan_time*: the plan-time instance; an unpickled
    copy, as a streaming query's committing process builds, runs none of it)."""
    options = with_checkpoint(source.options, streaming=streaming,
                              session_root=source.session_root() if streaming else None)
    options = _with_session_options(source, options)
    sink = source.build_sink(sink_options(options))
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    checkpointed = bool(option(options, "checkpointLocation"))
    # A named write (txnAppId) keeps its decisions in the target's ledger whatever its commit mode:
    # a rerun may commit another way (the first run created the table, the rerun finds it) and
    # must find what the first run committed in the same place.
    named = bool(option(options, "sinkId") or option(options, "txnAppId"))
    if plan_time and not checkpointed and not streaming and isinstance(sink, LedgerHost) \
            and (named or (not overwrite and not _decides_itself(sink))):
        # The lease of a ledger kept in the target is held by the driver's agent: it starts (a driver's
        # first write) while the sink loads its database code and validates, not waited for here. (An
        # overwrite commits in one local transaction in the sinks that take it: its lease, if any, starts
        # the agent when asked.)
        DriverAgent().start()
    setup = capability(sink, WriteSetup)
    setup.configure_write(arrow_schema, overwrite=overwrite, streaming=streaming, checkpointed=checkpointed)
    configure_worker_logging()
    validated = False
    target = None
    ephemeral = None
    if not checkpointed and not streaming:
        if (named or not _decides_itself(sink)) and plan_time:
            target = target_ledger_of(sink)
            if target is not None:
                setup.validate(arrow_schema)  # settles the commit mode (twopc-jdbc asks the server)
                validated = True
                target = None if _decides_itself(sink) and not named else target
        if _decides_itself(sink) and target is None:
            ephemeral = make_ephemeral_ledger()
    runtime = RuntimeOptions.parse(options, streaming=streaming,
                                   ephemeral_location=ephemeral or (target.location if target else None))
    if target is not None:
        runtime = dataclasses.replace(runtime, in_target=True)
    if plan_time and checkpointed and not option(source.options, "checkpointLocation") \
            and not spark_checkpoint_started(runtime.checkpoint_location):
        raise missing_spark_checkpoint(runtime.checkpoint_location)
    lease = None
    identity = instance = None
    if target is not None:
        sink_id = runtime.sink_id or ephemeral_sink_id()
        lease = target.acquire(sink_id)  # before any record: a held lease is a live writer
        try:
            ledger = open_target_ledger(target, sink_id)
            ledger.bind_sink_id(sink_id, sink_id)
        except BaseException:
            settle_own(sink, target, sink_id, lease)
            raise
        log.info("twopc: sink %s keeps its ledger in %s (no checkpointLocation)", sink_id, target.location)
    else:
        ledger = CommitLedger(runtime.checkpoint_location)
        default_id = ephemeral_sink_id() if runtime.ephemeral else default_sink_id(
            runtime.checkpoint_location)
        sink_id = ledger.bind_sink_id(runtime.sink_id, default_id)
        named_target = capability(sink, NamedTarget)
        identity = None if runtime.ephemeral else named_target.target_identity()
        instance = named_target.target_instance() if identity is not None and plan_time else None
        if plan_time and runtime.sink_id and not runtime.ephemeral \
                and (leased := target_ledger_of(sink)) is not None:
            # a sink id given by the user may be given to two writers: the second one is refused here,
            # before its recovery would roll back the first one's transactions as orphans
            lease = leased.acquire(sink_id, keep=streaming)
    skip = False
    epoch = None
    baseline = None
    committed_through = None
    if plan_time:
        try:
            # another target's checkpoint: touch nothing
            ledger.bind_target(identity, sink_id, record=False, instance=instance)
            # a micro-batch's plan continues its query's run: displaced by another actor, it stops
            epoch = ledger.claim(resume=streaming)
            if not validated:
                setup.validate(arrow_schema)
            if runtime.sink_id and not runtime.ephemeral and lease is None and target is None:
                claim_sink_id(sink, sink_id, runtime.checkpoint_location)  # sinks without a lease
            # recorded once the target validated (not a typo), with what reaches it again (no secret)
            ledger.bind_target(identity, sink_id, instance=instance, data_source=source.name(),
                               sink_class=class_path(source.sink_class),
                               options=capability(sink, NamedTarget).reopen_options(sink_options(options)))
            RecoveryCoordinator(sink, ledger, sink_id=sink_id, claimed=True).run()
            if not streaming and (others := target or target_ledger_of(sink)) is not None:
                resolve_abandoned(sink, others, skip=sink_id)
            sweep_dead_ledgers()  # after validate: a sink may still look a dead write's ledger up
            if not runtime.ephemeral:
                at_plan_time(sink, sink_id, ledger, source.options)
            baseline = ledger.abort_records()  # before any task of this run: see twopc._fence, window 2
        except BaseException:
            if ephemeral is not None:
                shutil.rmtree(ephemeral, ignore_errors=True)
            if target is not None:
                settle_own(sink, target, sink_id, lease)
            elif lease is not None and not streaming and (leased := target_ledger_of(sink)) is not None:
                leased.release(lease)
            raise
        finally:
            sink.close()
        if streaming:
            committed_through = ledger.latest_committed()
        else:
            latest = ledger.latest_committed()
            assert runtime.txn_version is not None
            skip = latest is not None and runtime.txn_version <= latest
            if skip and runtime.txn_version == latest:  # a rerun of a committed job: what txnVersion is for
                log.info("twopc: sink %s already committed txnVersion %s: this rerun writes nothing", sink_id,
                         latest)
            elif skip:  # a version counter that went back loses the new job's rows: the user should know
                log.warning("twopc: sink %s requested txnVersion %s, below the last one it committed (%s): this "
                            "write writes nothing. A new job needs a txnVersion above %s", sink_id,
                            runtime.txn_version, latest, latest)
    return WriterCore(sink, sink_id, runtime, skip=skip, format_name=source.name(), epoch=epoch,
                       lease=None if streaming else lease,  # a query keeps its lease while its driver runs
                       abort_baseline=baseline, committed_through=committed_through)
