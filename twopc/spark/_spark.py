"""Spark integration: Python data sources that drive any :class:`TwoPhaseCommitSink`, each part in
its own module so a Spark Python worker loads only what it runs:

- plan time, on the driver (:mod:`twopc.spark._plans`): options and target validated, sink id
  bound, recovery run before any task;
- tasks, on executors (:mod:`twopc.spark._writer`): one prepared transaction per attempt;
- commit, on the driver, with an *unpickled* copy (:mod:`twopc.spark._write_commit`), which runs
  no recovery (it would roll back the batch it commits).

A retried task rolls back what a provably dead attempt of its partition left prepared
(:meth:`AbortFence.roll_back_dead_attempts`); otherwise the sink bounds the lock wait
(``lockTimeout``) and the restart's recovery rolls the orphan back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .._runtime_options import option, sink_options
from .._sink import AnySink
from ._checkpoint import session_root_at_start
from ._writer import TwoPhaseCommitBatchWriter, TwoPhaseCommitStreamWriter

__all__ = ["TwoPhaseCommitDataSource", "data_source_for"]


class TwoPhaseCommitDataSource(DataSource):
    """A Spark data source (write side) around a :class:`TwoPhaseCommitSink` class. Subclass it with
    :attr:`sink_class` and :attr:`format_name` and :func:`register` it, or use :func:`data_source_for`."""

    sink_class: ClassVar[type[AnySink]]
    format_name: ClassVar[str] = ""
    #: ``spark.sql.streaming.checkpointLocation`` at :func:`register`: a named query without
    #: ``checkpointLocation`` keeps its ledger in ``<this>/<queryName>`` (:mod:`twopc.spark._checkpoint`).
    session_checkpoint_root: ClassVar[str | None] = None
    #: The session's ``spark.twopc.<option>`` defaults of the sink's ``__session_options__``.
    session_defaults: ClassVar[Mapping[str, str]] = {}
    #: Where the query listener notes the checkpoint folder at each start (None: Spark Connect).
    start_notes: ClassVar[str | None] = None

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._plan_time = True

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_plan_time"] = False  # copies Spark ships are never the plan-time instance
        return state

    @classmethod
    def name(cls) -> str:
        return cls.format_name or cls.sink_class.__name__.lower()

    @classmethod
    def session_option_names(cls) -> tuple[str, ...]:
        """The sink class's :attr:`~TwoPhaseCommitSink.__session_options__` (a data source importing its
        sink lazily may say them without importing it)."""
        return tuple(cls.sink_class.__session_options__)

    def session_root(self) -> str | None:
        """The session's default checkpoint folder as this query's start found it."""
        return session_root_at_start(self.start_notes, option(self.options, "queryName"),
                                     self.session_checkpoint_root)

    def build_sink(self, options: Mapping[str, str]) -> AnySink:
        """The sink of one write: ``sink_class.from_options`` of the options less the runtime's.
        Raises ConfigurationError: the options are wrong."""
        return self.sink_class.from_options(sink_options(options))

    def writer(self, schema: StructType, overwrite: bool) -> TwoPhaseCommitBatchWriter:
        # only the worker that plans loads the planner; every worker of the write imports this class
        from ._plans import plan
        return plan(self, TwoPhaseCommitBatchWriter, schema, overwrite, plan_time=self._plan_time)

    def streamWriter(self, schema: StructType, overwrite: bool) -> TwoPhaseCommitStreamWriter:  # noqa: N802 - Spark's method name
        from ._plans import plan  # as in writer
        return plan(self, TwoPhaseCommitStreamWriter, schema, overwrite, plan_time=self._plan_time)


def data_source_for(sink_class: type[AnySink], name: str) -> type[TwoPhaseCommitDataSource]:
    """A data source class for *sink_class*, usable as ``format(name)``."""
    return type(f"{sink_class.__name__}DataSource", (TwoPhaseCommitDataSource,),
                {"sink_class": sink_class, "format_name": name, "__module__": sink_class.__module__})
