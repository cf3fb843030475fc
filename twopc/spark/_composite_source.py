""":func:`composite`: a data source, made from Python objects, whose writes go to participants under one decision per
batch (``format("twopc-composite")``, built from options, is in :mod:`twopc.sinks`)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from .._composite import CompositeSink
from .._errors import ConfigurationError
from .._participant import Participant
from .._runtime_options import sink_options
from ._register import register
from ._spark import TwoPhaseCommitDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CompositeDataSourceBase", "composite"]


class CompositeDataSourceBase(TwoPhaseCommitDataSource):
    """A data source writing to the participants of :attr:`composite_sink`; its writer options are
    the runtime's only."""

    sink_class = CompositeSink
    composite_sink: ClassVar[CompositeSink]

    def build_sink(self, options: Mapping[str, str]) -> CompositeSink:
        """A copy of the composite (each write configures its own).
        Raises ConfigurationError: a writer option other than the runtime's was given."""
        if others := sink_options(options):
            raise ConfigurationError(
                f"format {self.name()!r} takes only the runtime options (checkpointLocation, sinkId, txnVersion, "
                f"...); got {sorted(others)}: give each participant its options where twopc.composite() builds it")
        return copy.deepcopy(self.composite_sink)


def composite(name: str, *participants: Participant, spark: SparkSession | None = None,
              ) -> type[CompositeDataSourceBase]:
    """A Spark data source, ``format(name)``, that writes every batch to *participants*
    under one decision (see :class:`CompositeSink`). Registered with *spark* when given
    (else pass it to :func:`twopc.register`)::

        orders = twopc.composite("orders-and-counters",
                                 twopc.Participant("orders", PostgresSink.from_options({...})),
                                 twopc.Participant("counters", RedisSink.from_options({...}),
                                                   columns=["id"]), spark=spark)
        df.writeStream.format("orders-and-counters").option("checkpointLocation", ck).start()

    Raises:
        ConfigurationError: no participant, a bad or duplicate name.
    """
    sink = CompositeSink(participants)
    attrs: dict[str, Any] = {"composite_sink": sink, "format_name": name, "__module__": __name__}
    ds: type[CompositeDataSourceBase] = type(f"CompositeDataSource_{len(participants)}", (CompositeDataSourceBase,),
                                             attrs)
    if spark is not None:
        register(spark, ds)
    return ds
