"""Spark integration: Python data sources that drive any :class:`TwoPhaseCommitSink`.

Where the protocol runs (each part in a module of its own, so each Spark Python worker loads
only the part it runs):

- Plan time, on the driver, before any task (:mod:`twopc.spark._plans`): the options and the target
  are validated, the sink id bound, and recovery run, so no task meets a stale prepared
  transaction.
- Tasks, on executors (:mod:`twopc.spark._writer`): one transaction per task attempt, prepared, its
  handle returned; the batch id is Spark's ``streaming.sql.batchId`` local property.
- Commit, on the driver, in another Python process with an *unpickled* copy of the data source
  (:mod:`twopc.spark._write_commit`): the copy runs no recovery (it would roll back the batch it commits).

A retried task may meet its dead predecessor's prepared transaction and its row locks; the
driver cannot roll it back while the batch runs (with speculation it may be the attempt Spark
chooses). The retry rolls back what a provably dead attempt of its partition left
(:meth:`AbortFence.roll_back_dead_attempts`); otherwise the sink bounds the wait (PostgreSQL's
``lockTimeout``), the write fails, and the restart's recovery rolls the orphan back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .._runtime_options import option, sink_options
from .._sink import AnySink
from ._checkpoint import session_root_at_start
from ._writer import TwoPhaseCommitBatchWriter, TwoPhaseCommitStreamWriter

__all__ = [
    "TwoPhaseCommitDataSource",
    "data_source_for",
]


class TwoPhaseCommitDataSource(DataSource):
    """A Spark data source (write side) around a :class:`TwoPhaseCommitSink` class.

    Subclass it, set :attr:`sink_class` and :attr:`format_name`, and register it with
    :func:`register`; or let :func:`data_source_for` do both.
    """

    sink_class: ClassVar[type[AnySink]]
    format_name: ClassVar[str] = ""
    #: The session's ``spark.sql.streaming.checkpointLocation`` when :func:`register` ran
    #: (see :mod:`twopc.spark._checkpoint`): a named streaming query without a
    #: ``checkpointLocation`` option keeps its ledger in ``<this>/<queryName>``, as Spark does,
    #: unless its start noted the session's folder then in :attr:`start_notes`.
    session_checkpoint_root: ClassVar[str | None] = None
    #: The session's defaults of the options the sink names in ``__session_options__``, read by
    #: :func:`register` from ``spark.twopc.<option>`` (see :mod:`twopc.spark._session_options`).
    session_defaults: ClassVar[Mapping[str, str]] = {}
    #: The folder where the session's query listener notes, at each start of a query, the
    #: session's default checkpoint folder (None: no listener, e.g. Spark Connect).
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
        """The writer options that take a session default (``spark.twopc.<option>``): the
        sink class's :attr:`~TwoPhaseCommitSink.__session_options__`. A data source that imports
        its sink class only when a write needs it says them without importing it."""
        return tuple(cls.sink_class.__session_options__)

    def session_root(self) -> str | None:
        """The session's default checkpoint folder as this query's start found it
        (:func:`~twopc.spark._checkpoint.session_root_at_start`)."""
        return session_root_at_start(self.start_notes, option(self.options, "queryName"),
                                     self.session_checkpoint_root)

    def build_sink(self, options: Mapping[str, str]) -> AnySink:
        """The sink of one write, from its writer *options* less the runtime's
        (:func:`~twopc._runtime_options.sink_options`). Default:
        ``sink_class.from_options(those options)``.

        Raises:
            ConfigurationError: the options are wrong.
        """
        return self.sink_class.from_options(sink_options(options))

    def writer(self, schema: StructType, overwrite: bool) -> TwoPhaseCommitBatchWriter:
        # the planner (the ledger's claim, recovery, the driver's agent) loads in the worker that plans a
        # write: every worker of the write imports this class (its data source's), and only one plans
        from ._plans import plan
        return plan(self, TwoPhaseCommitBatchWriter, schema, overwrite, plan_time=self._plan_time)

    def streamWriter(self, schema: StructType, overwrite: bool) -> TwoPhaseCommitStreamWriter:  # noqa: N802 - Spark's method name
        from ._plans import plan  # as in writer
        return plan(self, TwoPhaseCommitStreamWriter, schema, overwrite, plan_time=self._plan_time)


def data_source_for(sink_class: type[AnySink], name: str) -> type[TwoPhaseCommitDataSource]:
    """Return a data source class for *sink_class*, usable as ``format(name)``."""
    return type(
        f"{sink_class.__name__}DataSource",
        (TwoPhaseCommitDataSource,),
        {"sink_class": sink_class, "format_name": name, "__module__": sink_class.__module__},
    )
