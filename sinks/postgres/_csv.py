"""Arrow record batches to ``COPY ... (FORMAT csv)`` text via ``pyarrow.csv``, for the columns the
binary encoder does not cover. Strings are always quoted (an empty string is ``""``, a null an
empty field); ``bytea`` goes as ``\\x`` hex, zoned timestamps as UTC marked ``Z``."""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ._binary import CHUNK_ROWS
from ._columns import PgColumn, check_no_nul, is_binary

__all__ = ["encode_csv"]

_LB = pa.large_binary()


def _utc_text(arr: pa.Array) -> pa.Array:
    """Zoned timestamps as their UTC wall time marked ``Z`` (``2026-01-01 00:00:00.000000Z``), which
    PostgreSQL reads as UTC in any session zone; faster than printing through the zone, which also
    truncates historic offsets to minutes. Nulls stay null."""
    text = arr.cast(pa.timestamp(arr.type.unit)).cast(pa.string())
    return pc.binary_join_element_wise(text, pa.scalar("Z"), pa.scalar(""))


def encode_csv(arrays: Sequence[pa.Array], names: Sequence[str],
               columns: Sequence[PgColumn]) -> Iterator[memoryview]:
    """Yield CSV text for ``COPY ... (FORMAT csv)`` (no header), chunk by chunk."""
    prepared = []
    for name, arr in zip(names, arrays, strict=True):
        check_no_nul(name, arr)
        if is_binary(arr.type):  # bytea input syntax \\x<hex>, in Python: Arrow has no hex kernel (only a bytea
            # column in a batch that another column forces to CSV gets here)
            arr = pa.array([None if v is None else "\\x" + v.hex() for v in arr.cast(_LB).to_pylist()],
                           pa.large_string())
        elif pa.types.is_timestamp(arr.type) and arr.type.tz is not None:
            arr = _utc_text(arr)
        prepared.append(arr)
    del columns  # the server parses text for any column type
    opts = pacsv.WriteOptions(include_header=False, quoting_style="needed", batch_size=8192)
    cols = [f"c{i}" for i in range(len(prepared))]  # header is off; avoid odd names
    batch = pa.RecordBatch.from_arrays(prepared, names=cols)
    for lo in range(0, batch.num_rows, CHUNK_ROWS):
        sink = io.BytesIO()
        pacsv.write_csv(batch.slice(lo, CHUNK_ROWS), sink, opts)
        yield sink.getbuffer()
