"""Arrow record batches to PostgreSQL ``COPY ... FROM STDIN`` streams, without Python
objects per row (and without numpy: only pyarrow compute kernels).

Two encodings:

- **binary** (``COPY ... (FORMAT binary)``): each field is ``int32 length || big-endian
  value`` (byte-swapped with :meth:`array.array.byteswap`), a row is the
  ``binary_join_element_wise`` of its fields, and the COPY stream is the joined array's
  data buffer. The server parses it ~1.7x faster than CSV (measured here, 1M rows of
  (bigint, text, double), pre-encoded: ~2.1-2.2M rows/s vs ~0.95-1.45M rows/s), and the
  server is the bottleneck. Binary input must match the column's type exactly, so values
  are cast to the table's type first (``bigint`` -> ``integer`` is range-checked). Only the
  pairs in :data:`BINARY_TYPES` are encoded this way.
- **CSV** (``COPY ... (FORMAT csv)``) written by ``pyarrow.csv``, used when a column has a
  type the binary encoder does not cover (numeric, uuid, enums, time, ...). Strings are
  always quoted (``quoting_style="needed"`` quotes every string value), so an empty
  string is ``""`` and stays an empty string, while a null is an unquoted empty field,
  which PostgreSQL reads as NULL. ``bytea`` values are sent as ``\\x`` hex.

Both encoders reject text containing NUL bytes (PostgreSQL cannot store them) with a
:class:`ConfigurationError` naming the column, before anything reaches the server.
"""

from __future__ import annotations

import array
import io
import struct
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from twopc import ConfigurationError, SinkError

__all__ = [
    "BINARY_HEADER",
    "BINARY_TRAILER",
    "PgColumn",
    "binary_supported",
    "check_no_nul",
    "compatible",
    "encode_binary",
    "encode_csv",
    "normalize_array",
]

BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
BINARY_TRAILER = b"\xff\xff"

#: Rows encoded at once: bounds the temporary arrays of one COPY chunk.
CHUNK_ROWS = 65_536

_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970-01-01
_PG_EPOCH_DAYS = 10_957
# PostgreSQL's timestamp range relative to 2000-01-01 (4714-11-24 BC .. 294276 AD), in us.
_MIN_TS = -211_813_488_000_000_000
_END_TS = 9_223_371_331_200_000_000
# date range: julian day 0 .. (2^31 - 1 - 68) days after 2000-01-01 (approximately; the
# server checks the exact bound).
_MIN_DATE = -2_451_545
_END_DATE = 2_147_483_494 - 2_451_545


@dataclass(frozen=True)
class PgColumn:
    """A column of the target table, as the catalog describes it.

    Attributes:
        name: exact column name.
        base_type: ``pg_type.typname`` of the column's type, domains resolved to their
            base type (``int4``, ``text``, ``timestamptz``...).
        display_type: the type as ``format_type`` prints it (``character varying(20)``).
        kind: ``pg_type.typtype`` of the base type (``b`` base, ``e`` enum, ...).
        category: ``pg_type.typcategory`` (``A`` for arrays).
        not_null: the column is ``NOT NULL``.
        has_default: the column has a default, is an identity or generated column.
        generated: the column is ``GENERATED ALWAYS AS (...) STORED`` (cannot be written).
    """

    name: str
    base_type: str
    display_type: str
    kind: str = "b"
    category: str = ""
    not_null: bool = False
    has_default: bool = False
    generated: bool = False


_INT_PG = frozenset({"int2", "int4", "int8"})
_FLOAT_PG = frozenset({"float4", "float8"})
_STRING_PG = frozenset({"text", "varchar", "bpchar", "name", "citext", "json", "jsonb", "uuid", "xml"})


def _is_int(t: pa.DataType) -> bool:
    return pa.types.is_integer(t)


def _is_string(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t)
            or getattr(pa.types, "is_string_view", lambda _t: False)(t))


def _is_binary(t: pa.DataType) -> bool:
    return (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or getattr(pa.types, "is_binary_view", lambda _t: False)(t))


def compatible(arrow_type: pa.DataType, col: PgColumn) -> bool:
    """Whether values of *arrow_type* can be written to *col*.

    integers -> integer family, numeric, real/double; floats -> real/double/numeric;
    strings -> text, varchar, char, name, citext, json(b), uuid, xml, enums; bool ->
    boolean; timestamps -> timestamp / timestamptz; dates -> date; decimals -> numeric;
    binary -> bytea; time -> time; an all-null column -> anything.
    """
    t = arrow_type
    if pa.types.is_dictionary(t):
        t = t.value_type
    pg = col.base_type
    if pa.types.is_null(t):
        return True
    if col.category == "A":
        return False
    if _is_int(t):
        return pg in _INT_PG or pg in _FLOAT_PG or pg == "numeric"
    if pa.types.is_floating(t):
        return pg in _FLOAT_PG or pg == "numeric"
    if pa.types.is_decimal(t):
        return pg == "numeric"
    if _is_string(t):
        return pg in _STRING_PG or col.kind == "e"
    if pa.types.is_boolean(t):
        return pg == "bool"
    if pa.types.is_timestamp(t):
        return pg in ("timestamp", "timestamptz")
    if pa.types.is_date(t):
        return pg == "date"
    if _is_binary(t):
        return pg == "bytea"
    if pa.types.is_time(t):
        return pg == "time"
    return False


def arrow_type_name(t: pa.DataType) -> str:
    """A short, stable name of an Arrow type for error messages."""
    return str(t)


# -- normalisation -------------------------------------------------------------------

def normalize_array(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Flatten chunks, decode dictionaries and views into plain Arrow arrays."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if getattr(pa.types, "is_string_view", lambda _t: False)(t):
        arr = arr.cast(pa.large_string())
    elif getattr(pa.types, "is_binary_view", lambda _t: False)(t) or pa.types.is_fixed_size_binary(t):
        arr = arr.cast(pa.large_binary())
    elif pa.types.is_date64(t):
        arr = arr.cast(pa.date32())
    return arr


def check_no_nul(name: str, arr: pa.Array) -> None:
    """Raise :class:`ConfigurationError` when a string of *arr* contains a NUL byte."""
    if not _is_string(arr.type) or len(arr) == 0 or arr.null_count == len(arr):
        return
    hits = pc.match_substring(arr, "\x00")
    if not pc.any(hits).as_py():
        return
    idx = pc.index(hits, True).as_py()
    raise ConfigurationError(
        f"column {name!r}: the value in row {idx} of this batch contains a NUL byte (\\x00), which "
        f"PostgreSQL text cannot store. Remove it before writing, e.g. "
        f"F.regexp_replace(F.col({name!r}), '\\\\x00', '')"
    )


# -- binary COPY ---------------------------------------------------------------------

#: (predicate on the Arrow type, PostgreSQL base types) pairs the binary encoder handles.
BINARY_TYPES: tuple[tuple[Callable[[pa.DataType], bool], frozenset[str]], ...] = (
    (pa.types.is_null, frozenset({"*"})),
    (_is_int, _INT_PG | _FLOAT_PG),
    (pa.types.is_floating, _FLOAT_PG),
    (pa.types.is_boolean, frozenset({"bool"})),
    (_is_string, frozenset({"text", "varchar", "bpchar", "json", "jsonb"})),
    (pa.types.is_date, frozenset({"date"})),
    (pa.types.is_timestamp, frozenset({"timestamp", "timestamptz"})),
    (_is_binary, frozenset({"bytea"})),
)


def binary_supported(arrow_type: pa.DataType, col: PgColumn) -> bool:
    """Whether :func:`encode_binary` can encode *arrow_type* for *col*."""
    t = arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type
    for pred, pgs in BINARY_TYPES:
        if pred(t):
            return "*" in pgs or col.base_type in pgs
    return False


_INT_TARGET = {"int2": (pa.int16(), "smallint"), "int4": (pa.int32(), "integer"), "int8": (pa.int64(), "bigint")}
_FLOAT_TARGET = {"float4": pa.float32(), "float8": pa.float64()}
_LB = pa.large_binary()
_NULL_FIELD = pa.scalar(b"\xff\xff\xff\xff", _LB)
_SEP = pa.scalar(b"", _LB)
_JSONB_VERSION = pa.scalar(b"\x01", _LB)
#: array typecode of each fixed width we byte-swap
_SWAP_CODES: dict[tuple[str, int], str] = {}
for _code in "hilqfd":
    _kind = "f" if _code in "fd" else "i"
    _SWAP_CODES.setdefault((_kind, array.array(_code).itemsize), _code)


def _big_endian(arr: pa.Array, kind: str) -> pa.Array:
    """The values of a primitive array (no Python objects) as big-endian
    ``large_binary`` of fixed width; null slots hold garbage (callers mask them)."""
    width = arr.type.bit_width // 8
    raw = memoryview(arr.buffers()[1])[arr.offset * width:(arr.offset + len(arr)) * width]
    if width > 1 and sys.byteorder == "little":
        swapped = array.array(_SWAP_CODES[(kind, width)])
        swapped.frombytes(raw)
        swapped.byteswap()
        buf = pa.py_buffer(swapped)
    else:
        buf = pa.py_buffer(bytes(raw))
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(arr), [None, buf]).cast(_LB)


def _fixed_field(values: pa.Array, kind: str, original: pa.Array) -> pa.Array:
    """``int32 width || value`` per row, ``-1`` for the nulls of *original*."""
    width = values.type.bit_width // 8
    field = pc.binary_join_element_wise(pa.scalar(struct.pack(">i", width), _LB), _big_endian(values, kind), _SEP)
    if original.null_count:
        field = pc.if_else(original.is_valid(), field, _NULL_FIELD)
    return field


def _var_field(arr: pa.Array, jsonb: bool) -> pa.Array:
    values = arr.cast(_LB)
    lengths = pc.binary_length(values)
    if jsonb:
        lengths = pc.add(lengths, 1)
    try:
        lengths = lengths.cast(pa.int32())
    except pa.ArrowInvalid:
        raise SinkError("a value is larger than 2 GiB, PostgreSQL's limit is 1 GiB per field") from None
    parts = [_big_endian(lengths, "i")] + ([_JSONB_VERSION] if jsonb else []) + [values]
    field = pc.binary_join_element_wise(*parts, _SEP)
    return field.fill_null(_NULL_FIELD) if arr.null_count else field


def _out_of_range(name: str, what: str) -> SinkError:
    return SinkError(f"column {name!r}: a value is out of range for PostgreSQL type {what}")


def _check_range(name: str, values: pa.Array, lo: int, hi: int, what: str) -> None:
    mm = pc.min_max(values)
    low, high = mm["min"].as_py(), mm["max"].as_py()
    if low is not None and (low < lo or high >= hi):
        raise _out_of_range(name, what)


def _binary_field(name: str, arr: pa.Array, col: PgColumn) -> pa.Array:
    t = arr.type
    n = len(arr)
    pg = col.base_type
    if pa.types.is_null(t) or arr.null_count == n:
        return pa.repeat(_NULL_FIELD, n)
    if _is_int(t) and pg in _INT_TARGET:
        target, pgname = _INT_TARGET[pg]
        try:
            cast = arr.cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise _out_of_range(name, pgname) from None
        return _fixed_field(cast, "i", arr)
    if (_is_int(t) or pa.types.is_floating(t)) and pg in _FLOAT_TARGET:
        return _fixed_field(arr.cast(_FLOAT_TARGET[pg], safe=False), "f", arr)
    if pa.types.is_boolean(t):
        return _fixed_field(arr.cast(pa.uint8()), "i", arr)
    if pa.types.is_date32(t):
        days = arr.cast(pa.int32())
        _check_range(name, days, _MIN_DATE + _PG_EPOCH_DAYS, _END_DATE, "date")
        return _fixed_field(pc.subtract(days, pa.scalar(_PG_EPOCH_DAYS, pa.int32())), "i", arr)
    if pa.types.is_timestamp(t):
        if t.unit != "us":
            try:
                arr = arr.cast(pa.timestamp("us", t.tz), safe=t.unit != "ns")
            except pa.ArrowInvalid:
                raise _out_of_range(name, col.display_type) from None
        us = arr.cast(pa.int64())
        # compare before shifting so that values near the int64 bounds cannot wrap around
        _check_range(name, us, _MIN_TS + _PG_EPOCH_US, _END_TS, col.display_type)
        return _fixed_field(pc.subtract(us, pa.scalar(_PG_EPOCH_US, pa.int64())), "i", arr)
    if _is_string(t) or _is_binary(t):
        return _var_field(arr, jsonb=pg == "jsonb")
    raise ConfigurationError(f"column {name!r}: no binary COPY encoding of {t} for {col.display_type}")


def _data_of(rows: pa.Array) -> memoryview:
    """The bytes of every value of a ``large_binary`` array, concatenated (zero copy)."""
    n = len(rows)
    bufs = rows.buffers()
    offsets = memoryview(bufs[1]).cast("q")
    start, end = offsets[rows.offset], offsets[rows.offset + n]
    return memoryview(bufs[2])[start:end] if bufs[2] is not None else memoryview(b"")


def encode_binary(arrays: Sequence[pa.Array], names: Sequence[str],
                  columns: Sequence[PgColumn]) -> Iterator[memoryview]:
    """Yield the binary COPY tuples of *arrays* (no header/trailer), chunk by chunk.

    Raises:
        ConfigurationError: a string contains a NUL byte.
        SinkError: a value does not fit the column's type (e.g. > 2^31 into ``integer``).
    """
    if not arrays:
        return
    n_total = len(arrays[0])
    nfields = pa.scalar(struct.pack(">h", len(arrays)), _LB)
    for name, arr in zip(names, arrays, strict=True):
        check_no_nul(name, arr)
    for lo in range(0, n_total, CHUNK_ROWS):
        n = min(CHUNK_ROWS, n_total - lo)
        fields = [_binary_field(name, arr.slice(lo, n), col)
                  for name, arr, col in zip(names, arrays, columns, strict=True)]
        rows = pc.binary_join_element_wise(nfields, *fields, _SEP)
        yield _data_of(rows)


# -- CSV COPY ------------------------------------------------------------------------

def _bytea_hex(arr: pa.Array) -> pa.Array:
    """``\\x<hex>`` texts (bytea input syntax) for a binary array.

    Arrow has no hex kernel, so this one loops in Python; it runs only when a bytea
    column shares a batch with a column that forces CSV (numeric, uuid, ...)."""
    return pa.array([None if v is None else "\\x" + v.hex() for v in arr.cast(_LB).to_pylist()],
                    pa.large_string())


def encode_csv(arrays: Sequence[pa.Array], names: Sequence[str],
               columns: Sequence[PgColumn]) -> Iterator[memoryview]:
    """Yield CSV text for ``COPY ... (FORMAT csv)`` (no header), chunk by chunk.

    Raises:
        ConfigurationError: a string contains a NUL byte.
    """
    prepared = []
    for name, arr in zip(names, arrays, strict=True):
        check_no_nul(name, arr)
        if _is_binary(arr.type):
            arr = _bytea_hex(arr)
        elif pa.types.is_timestamp(arr.type) and arr.type.tz not in (None, "UTC"):
            # Arrow prints local time with the offset truncated to minutes (historic offsets
            # like Paris' +00:09:21 lose seconds); the same instant in UTC prints exactly.
            arr = arr.cast(pa.timestamp(arr.type.unit, "UTC"))
        prepared.append(arr)
    del columns  # the server parses text for any column type
    opts = pacsv.WriteOptions(include_header=False, quoting_style="needed", batch_size=8192)
    cols = [f"c{i}" for i in range(len(prepared))]  # header is off; avoid odd names
    batch = pa.RecordBatch.from_arrays(prepared, names=cols)
    for lo in range(0, batch.num_rows, CHUNK_ROWS):
        sink = io.BytesIO()
        pacsv.write_csv(batch.slice(lo, CHUNK_ROWS), sink, opts)
        yield sink.getbuffer()
