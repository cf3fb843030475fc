"""A participant of a composite sink (:mod:`twopc._composite`): a named sink and the rows it gets, projected from the
written rows (kept and renamed columns, an optional transform, an optional micro-batch id column)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from ._errors import ConfigurationError
from ._sink import AnySink, TwoPhaseCommitSink

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["AnySink", "Participant", "Transform"]

Transform: TypeAlias = "Callable[[pa.RecordBatch], pa.RecordBatch]"

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_MAX_NAME = 16


def _no_rows(schema: pa.Schema) -> pa.RecordBatch:
    """A batch of *schema* with no rows, without pandas (~0.4 s to import in a fresh worker)."""
    import pyarrow as pa
    return pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)


@dataclass(frozen=True)
class Participant:
    """One target of a composite: a named sink and the rows it gets.

    Attributes:
        name: 1-16 characters ``A-Z a-z 0-9 _``, unique; part of its sink id
            (``<sink id>.<name>``), so keep it stable.
        sink: the participant's sink, configured with its own options.
        columns: the columns it keeps, in order; a mapping renames (``{"amount": "total"}``).
            ``None`` keeps every column.
        transform: a record batch to record batch function applied after *columns* (derived rows,
            any count). Deterministic (replays), fine with no rows (the driver learns the schema
            so), picklable.
        batch_column: adds this ``int64`` column, last, holding the micro-batch id (or
            ``txnVersion``): what a reader filters on for a consistent cut across targets."""

    name: str
    sink: AnySink
    columns: Sequence[str] | Mapping[str, str] | None = None
    transform: Transform | None = None
    batch_column: str | None = None
    _renames: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and 0 < len(self.name) <= _MAX_NAME and set(self.name) <= _NAME_CHARS):
            raise ConfigurationError(f"composite participant name {self.name!r} is invalid: use 1-{_MAX_NAME} "
                                     f"characters from A-Z a-z 0-9 _")
        if not isinstance(self.sink, TwoPhaseCommitSink):
            raise ConfigurationError(f"composite participant {self.name!r}: {self.sink!r} is not a "
                                     f"TwoPhaseCommitSink")
        if isinstance(cols := self.columns, str):
            raise ConfigurationError(f"composite participant {self.name!r}: columns must be a list or a mapping, "
                                     f"not the string {cols!r}")
        pairs = cols.items() if isinstance(cols, Mapping) else ((c, c) for c in cols or ())
        object.__setattr__(self, "_renames", tuple((str(k), str(v)) for k, v in pairs))

    def project(self, batch: pa.RecordBatch, batch_id: int = 0) -> pa.RecordBatch:
        """The rows this participant gets from *batch* of micro-batch *batch_id*.
        Raises ConfigurationError: a kept column is missing, or the transform returns no record batch."""
        import pyarrow as pa  # here: ``import twopc`` loads no pyarrow (an operator's command needs none)
        if self._renames:
            if missing := [src for src, _ in self._renames if src not in batch.schema.names]:
                raise ConfigurationError(
                    f"composite participant {self.name!r} keeps columns {missing} that the written DataFrame "
                    f"does not have (it has {batch.schema.names}): fix the participant's columns")
            batch = pa.RecordBatch.from_arrays([batch.column(src) for src, _ in self._renames],
                                               names=[dst for _, dst in self._renames])
        if self.transform is not None:
            out = self.transform(batch)
            if isinstance(out, pa.Table):
                out = out.combine_chunks().to_batches()[0] if out.num_rows else _no_rows(out.schema)
            if not isinstance(out, pa.RecordBatch):
                raise ConfigurationError(f"composite participant {self.name!r}: its transform returned "
                                         f"{type(out).__name__}, not a pyarrow.RecordBatch")
            batch = out
        if self.batch_column:
            if self.batch_column in batch.schema.names:
                raise ConfigurationError(f"composite participant {self.name!r}: its rows already have a column "
                                         f"{self.batch_column!r}; choose another batch_column")
            # from the bytes: pa.array of Python ints imports pandas (about 0.4 s in a fresh Spark worker)
            ids = pa.Array.from_buffers(pa.int64(), batch.num_rows,
                                        [None, pa.py_buffer(struct.pack("=q", batch_id) * batch.num_rows)])
            batch = batch.append_column(pa.field(self.batch_column, pa.int64(), nullable=False), ids)
        return batch

    def project_schema(self, schema: pa.Schema) -> pa.Schema:
        """The schema :meth:`project` makes of *schema*; raises as :meth:`project`."""
        return self.project(_no_rows(schema)).schema
