"""The sink contract is narrow: twelve public methods, and optional capabilities the runtime
finds with ``isinstance``. A sink class that defines part of a capability without having it is
refused where it is defined (the runtime would not see those methods), and a sink without a
capability gets what the runtime does without it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

from twopc import (
    CommitOutcome,
    CommitShape,
    ConfigurationError,
    TransactionContext,
    TransactionHandle,
    TwoPhaseCommitSink,
)
from twopc.spi import BatchCommit, Inspectable, NamedTarget, WriteSetup, capability

SCHEMA = pa.schema([("id", pa.int64())])


class _Bare(TwoPhaseCommitSink[dict[str, Any], list[Any], TransactionHandle]):
    """The contract and nothing else."""

    def begin_transaction(self, context: TransactionContext) -> list[Any]:
        return []

    def invoke(self, txn: list[Any], value: dict[str, Any]) -> None:
        txn.append(value)

    def pre_commit(self, txn: list[Any]) -> TransactionHandle:
        return TransactionHandle("t1", "s", 0, 0, 0)

    def rollback(self, txn: list[Any]) -> None:
        txn.clear()

    def commit(self, handle: TransactionHandle) -> CommitOutcome:
        return CommitOutcome.COMMITTED

    def abort(self, handle: TransactionHandle) -> None:
        return None

    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> Sequence[TransactionHandle]:
        return [TransactionHandle("t1", sink_id, 0, 0, 0)]


def test_the_contract_has_at_most_twelve_public_names() -> None:
    # every public name, methods or not: the runtime's class attributes are dunders
    public = [n for n in dir(TwoPhaseCommitSink) if not n.startswith("_")]
    assert len(public) <= 12
    assert sorted(public) == ["abort", "begin_transaction", "close", "commit", "describe", "from_options", "invoke",
                              "invoke_batch", "list_prepared", "pre_commit", "recover_and_commit", "rollback"]
    assert TwoPhaseCommitSink.__handle_type__ is TransactionHandle and TwoPhaseCommitSink.__session_options__ == ()


@pytest.mark.parametrize(("old", "new"), [("handle_type", "__handle_type__"),
                                          ("session_options", "__session_options__")])
def test_a_sink_that_sets_a_renamed_attribute_is_refused_with_its_new_name(old: str, new: str) -> None:
    with pytest.raises(TypeError, match=rf"Old sets {old}: twopc reads it as {new} since 0.2.0 \(rename"):
        type("Old", (_Bare,), {old: ()})


def test_a_sink_without_a_capability_gets_what_the_runtime_does_without_it() -> None:
    sink = _Bare()
    assert not isinstance(sink, (WriteSetup, BatchCommit, Inspectable, NamedTarget))
    assert capability(sink, BatchCommit).commit_shape() is CommitShape.PER_HANDLE
    assert capability(sink, BatchCommit).commit_all([]) is None
    assert [d.handle.txn_id for d in capability(sink, Inspectable).prepared_details("s")] == ["t1"]
    assert capability(sink, NamedTarget).target_identity() is None
    setup = capability(sink, WriteSetup)
    setup.configure_write(SCHEMA, overwrite=False, streaming=True, checkpointed=True)
    with pytest.raises(ConfigurationError, match=r"_Bare does not support overwrite.*outputMode\(\"append\"\)"):
        setup.configure_write(SCHEMA, overwrite=True, streaming=True, checkpointed=True)
    assert setup.commit_mode() == "_Bare: a prepared transaction per task"


def test_a_sink_with_a_capability_is_itself_and_inherits_the_defaults_it_does_not_define() -> None:
    class Validated(_Bare, WriteSetup):
        def validate(self, schema: pa.Schema) -> None:
            raise ConfigurationError("no table")

    sink = Validated()
    assert capability(sink, WriteSetup) is sink
    with pytest.raises(ConfigurationError, match="no table"):
        capability(sink, WriteSetup).validate(SCHEMA)
    assert sink.commit_may_be_refused() is None
    with pytest.raises(ConfigurationError, match="Validated does not support overwrite"):
        sink.configure_write(SCHEMA, overwrite=True, streaming=False, checkpointed=True)


def test_a_sink_that_defines_half_a_capability_is_refused_where_it_is_defined() -> None:
    with pytest.raises(TypeError, match=r"Half defines validate of WriteSetup but not commit_may_be_refused, "
                                        r"commit_mode, configure_write: subclass twopc.spi.WriteSetup"):
        class Half(_Bare):  # the runtime would never call this validate
            def validate(self, schema: pa.Schema) -> None:
                raise ConfigurationError("never seen")


def test_every_built_in_sink_has_whole_capabilities() -> None:
    # importing them is the check (a half capability raises TypeError at class definition); this
    # names what each has, so that a capability dropped from a sink's bases shows here
    from twopc import sinks
    from twopc.sinks.sql import PreparedSqlSink, StagingSink
    has = {cls.__name__: sorted(k.__name__ for k in (WriteSetup, BatchCommit, Inspectable, NamedTarget)
                                if issubclass(cls, k))
           for cls in (sinks.FileSink, sinks.RedisSink, sinks.HttpSink, sinks.JdbcSink, PreparedSqlSink, StagingSink,
                       sinks.OptionsCompositeSink)}
    assert all(v == ["BatchCommit", "Inspectable", "NamedTarget", "WriteSetup"] for k, v in has.items()
               if k != "FileSink"), has
    assert has["FileSink"] == ["Inspectable", "NamedTarget", "WriteSetup"]
