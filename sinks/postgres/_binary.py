"""Arrow record batches to PostgreSQL binary ``COPY ... FROM STDIN`` streams, with pyarrow compute
kernels and :mod:`array` only (no Python object per row, no numpy). Values are cast to the table's
type first (narrowing is range-checked); rows are interleaved with ``take`` over cached gather
indices. Types outside :data:`BINARY_TYPES` go as CSV (:mod:`twopc.sinks.postgres._copy`)."""

from __future__ import annotations

import array
import itertools
import struct
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from twopc import ConfigurationError, SinkError

from ..sql._json_values import is_nested
from ._columns import FLOAT_PG, INT_PG, PgColumn, check_no_nul, is_binary, is_string, value_bytes

__all__ = ["BINARY_HEADER", "BINARY_TRAILER", "BINARY_TYPES", "CHUNK_ROWS", "binary_supported", "encode_binary"]

BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
BINARY_TRAILER = b"\xff\xff"

#: Rows encoded at once: bounds the temporary arrays of one COPY chunk.
CHUNK_ROWS = 65_536

_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970-01-01
_PG_EPOCH_DAYS = 10_957
# PostgreSQL's timestamp range relative to 2000-01-01 (4714-11-24 BC .. 294276 AD), in us.
_MIN_TS = -211_813_488_000_000_000
_END_TS = 9_223_371_331_200_000_000
# date range: julian day 0 .. about 2^31 days after 2000-01-01 (the server checks the exact bound)
_MIN_DATE = -2_451_545
_END_DATE = 2_147_483_494 - 2_451_545


#: (predicate on the Arrow type, PostgreSQL base types) pairs the binary encoder handles.
BINARY_TYPES: tuple[tuple[Callable[[pa.DataType], bool], frozenset[str]], ...] = (
    (pa.types.is_null, frozenset({"*"})),
    (pa.types.is_integer, INT_PG | FLOAT_PG),
    (pa.types.is_floating, FLOAT_PG),
    (pa.types.is_boolean, frozenset({"bool"})),
    (is_string, frozenset({"text", "varchar", "bpchar", "json", "jsonb"})),
    (is_nested, frozenset({"json", "jsonb"})),  # sent as their JSON text (normalize_array)
    (pa.types.is_date, frozenset({"date"})),
    (pa.types.is_timestamp, frozenset({"timestamp", "timestamptz"})),
    (is_binary, frozenset({"bytea"})),
)


def binary_supported(arrow_type: pa.DataType, col: PgColumn) -> bool:
    t = arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type
    for pred, pgs in BINARY_TYPES:
        if pred(t):
            return "*" in pgs or col.base_type in pgs
    return False


_INT_CAST = {"int2": (pa.int16(), "smallint"), "int4": (pa.int32(), "integer"), "int8": (pa.int64(), "bigint")}
_FLOAT_CAST = {"float4": pa.float32(), "float8": pa.float64()}
_LB = pa.large_binary()
_INT_FORMATS = {8: "b", 16: "h", 32: "i", 64: "q"}


def const(value: int | bytes, type_: pa.DataType) -> pa.Scalar:
    """The scalar *value* of *type_* (a signed integer, ``binary`` or ``large_binary``), built from
    its bytes: a scalar from a Python value makes pyarrow import pandas (0.4 s of CPU in a fresh
    Spark worker), one from a buffer does not."""
    if isinstance(value, bytes) and (pa.types.is_binary(type_) or pa.types.is_large_binary(type_)):
        offsets = struct.pack("=2q" if pa.types.is_large_binary(type_) else "=2i", 0, len(value))
        return pa.Array.from_buffers(type_, 1, [None, pa.py_buffer(offsets), pa.py_buffer(value)])[0]
    if isinstance(value, int) and pa.types.is_signed_integer(type_):
        data = struct.pack("=" + _INT_FORMATS[type_.bit_width], value)
        return pa.Array.from_buffers(type_, 1, [None, pa.py_buffer(data)])[0]
    raise TypeError(f"const: no {type_} scalar of {value!r}")


# scalars from their bytes, never from Python values (see const)
_NULL_FIELD = const(b"\xff\xff\xff\xff", _LB)
_SEP = const(b"", _LB)
_JSONB_VERSION = const(b"\x01", _LB)
#: array typecode of each fixed width we byte-swap (the first of a width wins)
_SWAP_CODES = {("f" if c in "fd" else "i", array.array(c).itemsize): c for c in reversed("hilqfd")}


def _lengths(arr: pa.Array, jsonb: bool) -> pa.Array:
    """The int32 field lengths of a binary-like array's values (one more for jsonb's version byte)."""
    lengths = pc.binary_length(arr)
    if jsonb:
        lengths = pc.add(lengths, const(1, lengths.type))
    try:
        return lengths.cast(pa.int32())
    except pa.ArrowInvalid:
        raise SinkError("a value is larger than 2 GiB, PostgreSQL's limit is 1 GiB per field") from None


def _jsonb_fields(arr: pa.Array) -> pa.Array:
    """The fields of a jsonb column with nulls: ``length || version || text``, or ``-1``."""
    values = arr.cast(_LB)
    lengths = _lengths(values, jsonb=True)
    big = pa.FixedSizeBinaryArray.from_buffers(pa.binary(4), len(lengths),
                                               [None, pa.py_buffer(_big_endian_bytes(lengths, "i"))]).cast(_LB)
    return pc.binary_join_element_wise(big, _JSONB_VERSION, values, _SEP).fill_null(_NULL_FIELD)


def _out_of_range(name: str, what: str) -> SinkError:
    return SinkError(f"column {name!r}: a value is out of range for PostgreSQL type {what}")


def _check_range(name: str, values: pa.Array, lo: int, hi: int, what: str) -> None:
    mm = pc.min_max(values)
    low, high = mm["min"].as_py(), mm["max"].as_py()
    if low is not None and (low < lo or high >= hi):
        raise _out_of_range(name, what)


def _binary_values(name: str, arr: pa.Array, col: PgColumn) -> tuple[pa.Array, str]:
    """A fixed-width column as a primitive array of the wire type, and its byte-swap kind (``i``/``f``)."""
    t = arr.type
    pg = col.base_type
    if pa.types.is_integer(t) and pg in _INT_CAST:
        cast_to, pgname = _INT_CAST[pg]
        if t == cast_to:
            return arr, "i"
        try:
            return arr.cast(cast_to, safe=True), "i"
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise _out_of_range(name, pgname) from None
    if (pa.types.is_integer(t) or pa.types.is_floating(t)) and pg in _FLOAT_CAST:
        cast_to = _FLOAT_CAST[pg]
        return (arr if t == cast_to else arr.cast(cast_to, safe=False)), "f"
    if pa.types.is_boolean(t):
        return arr.cast(pa.uint8()), "i"
    if pa.types.is_date32(t):
        days = arr.cast(pa.int32())
        _check_range(name, days, _MIN_DATE + _PG_EPOCH_DAYS, _END_DATE, "date")
        return pc.subtract(days, const(_PG_EPOCH_DAYS, pa.int32())), "i"
    if pa.types.is_timestamp(t):
        if t.unit != "us":
            try:
                arr = arr.cast(pa.timestamp("us", t.tz), safe=t.unit != "ns")
            except pa.ArrowInvalid:
                raise _out_of_range(name, col.display_type) from None
        us = arr.view(pa.int64())
        # compare before shifting so that values near the int64 bounds cannot wrap around
        _check_range(name, us, _MIN_TS + _PG_EPOCH_US, _END_TS, col.display_type)
        return pc.subtract(us, const(_PG_EPOCH_US, pa.int64())), "i"
    raise ConfigurationError(f"column {name!r}: no binary COPY encoding of {t} for {col.display_type}")


@dataclass(frozen=True)
class _Fixed:
    """A fixed-width part of every row: ``width`` big-endian bytes per row."""

    width: int
    data: bytes | array.array[Any]


_NULL_BYTES = b"\xff\xff\xff\xff"

#: A part of a binary COPY row: constant bytes, a fixed-width value, or a binary-like array (null: nothing).
_Piece: TypeAlias = bytes | _Fixed | pa.Array


def _big_endian_bytes(arr: pa.Array, kind: str) -> bytes | array.array[Any]:
    """The values of a primitive array without nulls, big-endian (one copy, one swap)."""
    width = arr.type.bit_width // 8
    raw = memoryview(arr.buffers()[1])[arr.offset * width:(arr.offset + len(arr)) * width]
    if width == 1 or sys.byteorder == "big":
        return raw.tobytes()
    swapped = array.array(_SWAP_CODES[(kind, width)])
    swapped.frombytes(raw)
    swapped.byteswap()
    return swapped


def _binary_pieces(name: str, arr: pa.Array, col: PgColumn) -> list[_Piece]:
    """The parts of one field of every row: ``int32 length || value``, or ``-1``."""
    t = arr.type
    n = len(arr)
    if pa.types.is_null(t) or arr.null_count == n:
        return [_NULL_BYTES]
    if is_string(t) or is_binary(t):
        if (jsonb := col.base_type == "jsonb") and arr.null_count:
            return [_jsonb_fields(arr)]  # the version byte only for non-null values
        lengths = _lengths(arr, jsonb)
        if arr.null_count:
            lengths = lengths.fill_null(const(-1, lengths.type))
        return [_Fixed(4, _big_endian_bytes(lengths, "i")), *([b"\x01"] if jsonb else []), arr]
    values, kind = _binary_values(name, arr, col)
    width = values.type.bit_width // 8
    data = _big_endian_bytes(values, kind)
    if not arr.null_count:
        return [struct.pack(">i", width), _Fixed(width, data)]
    # with nulls the length (or -1) is a fixed part, the value a variable one, empty for null rows
    valid = arr.is_valid()
    lengths = pc.if_else(valid, const(width, pa.int32()), const(-1, pa.int32()))
    value = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [valid.buffers()[1], pa.py_buffer(data)])
    return [_Fixed(4, _big_endian_bytes(lengths, "i")), value]


#: Arrow type of each gather unit size
_UNITS = {1: pa.uint8(), 2: pa.uint16(), 4: pa.uint32(), 8: pa.uint64()}

# Gather indices by (kind, rows, layout): a write's batches share them; bounded by the cached arrays' bytes.
_INDEX_CACHE: dict[tuple[Any, ...], pa.Array] = {}
_INDEX_CACHE_LIMIT = 64 << 20
_INDEX_LOCK = threading.Lock()


def _cached_index(key: tuple[Any, ...], build: Callable[[], array.array[Any]]) -> pa.Array:
    if (idx := _INDEX_CACHE.get(key)) is not None:
        return idx
    a = build()
    idx = pa.Array.from_buffers(pa.int32() if a.typecode == "i" else pa.int64(), len(a), [None, pa.py_buffer(a)])
    if idx.nbytes <= _INDEX_CACHE_LIMIT // 4:
        with _INDEX_LOCK:
            held = sum(v.nbytes for v in _INDEX_CACHE.values())
            while _INDEX_CACHE and held + idx.nbytes > _INDEX_CACHE_LIMIT:
                held -= _INDEX_CACHE.pop(next(iter(_INDEX_CACHE))).nbytes
            _INDEX_CACHE[key] = idx
    return idx


def _index_array(size: int, top: int) -> array.array[Any]:
    code = "i" if top < 2**31 and array.array("i").itemsize == 4 else "q"
    return array.array(code, bytes(array.array(code).itemsize * size))


def _fixed_rows(group: Sequence[bytes | _Fixed], n: int) -> tuple[pa.Buffer, int]:
    """The fixed-width parts of *n* rows, interleaved row by row, and the row width: the parts are laid end to end as
    units of the largest size dividing every part, and one cached ``take`` gathers them row by row."""
    widths = [len(p) if isinstance(p, bytes) else p.width for p in group]
    unit = next(u for u in (8, 4, 2, 1) if all(w % u == 0 for w in widths))
    width = sum(widths)
    consts = b"".join(p for p in group if isinstance(p, bytes))
    if not (values := [p for p in group if not isinstance(p, bytes)]):
        return pa.py_buffer(consts * n), width
    src = bytearray(consts)
    for p in values:
        src += p.data
    layout = tuple(w if isinstance(p, bytes) else -w for p, w in zip(group, widths, strict=True))

    def build() -> array.array[Any]:
        per_row = width // unit
        idx = _index_array(n * per_row, len(src) // unit)
        pos, const_at, value_at = 0, 0, len(consts) // unit
        for w in layout:
            k = abs(w) // unit
            for j in range(k):
                if w > 0:
                    idx[pos + j::per_row] = array.array(idx.typecode, [const_at + j]) * n
                else:
                    idx[pos + j::per_row] = array.array(idx.typecode, range(value_at + j, value_at + j + n * k, k))
            if w > 0:
                const_at += k
            else:
                value_at += n * k
            pos += k
        return idx

    units = pa.Array.from_buffers(_UNITS[unit], len(src) // unit, [None, pa.py_buffer(src)])
    rows = units.take(_cached_index(("fixed", n, unit, layout), build))
    return rows.buffers()[1], width


def _interleave_index(n: int, k: int) -> pa.Array:
    """``[0, n, 2n, .., (k-1)n, 1, n+1, ...]``: takes row i of each of k stacked arrays in turn."""

    def build() -> array.array[Any]:
        idx = _index_array(n * k, n * k)
        for s in range(k):
            idx[s::k] = array.array(idx.typecode, range(s * n, (s + 1) * n))
        return idx

    return _cached_index(("rows", n, k), build)


def _value_bytes(arr: pa.Array) -> int:
    if pa.types.is_fixed_size_binary(arr.type):
        return len(arr) * arr.type.byte_width
    return len(value_bytes(arr))


def _assemble(pieces: Sequence[_Piece], n: int) -> memoryview:
    """The COPY tuples of *n* rows made of *pieces*, as one buffer: fixed-width runs become row
    segments (:func:`_fixed_rows`), stacked with the variable parts and interleaved by one ``take``."""
    segments: list[tuple[pa.Buffer, int] | pa.Array] = []
    for variable, run in itertools.groupby(pieces, lambda p: isinstance(p, pa.Array)):
        if variable:
            segments.extend(run)
        else:
            segments.append(_fixed_rows(list(run), n))
    if len(segments) == 1 and isinstance(segments[0], tuple):
        buf, width = segments[0]
        return memoryview(buf)[:n * width]
    total = sum(n * s[1] if isinstance(s, tuple) else _value_bytes(s) for s in segments)
    typ = pa.binary() if total < 2**31 - 1 else pa.large_binary()
    stack = []
    for s in segments:
        if isinstance(s, tuple):
            buf, width = s
            s = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, buf])
        stack.append(s if s.type == typ else s.cast(typ))
    rows = pa.concat_arrays(stack).take(_interleave_index(n, len(segments)))
    return value_bytes(rows)


def encode_binary(arrays: Sequence[pa.Array], names: Sequence[str],
                  columns: Sequence[PgColumn]) -> Iterator[memoryview]:
    """Yield the binary COPY tuples of *arrays* (no header/trailer), chunk by chunk; ConfigurationError
    on a NUL byte, SinkError on a value the column's type cannot hold."""
    if not arrays:
        return
    n_total = len(arrays[0])
    nfields = struct.pack(">h", len(arrays))
    for name, arr in zip(names, arrays, strict=True):
        check_no_nul(name, arr)
    for lo in range(0, n_total, CHUNK_ROWS):
        n = min(CHUNK_ROWS, n_total - lo)
        pieces: list[_Piece] = [nfields]
        for name, arr, col in zip(names, arrays, columns, strict=True):
            pieces.extend(_binary_pieces(name, arr if n == n_total else arr.slice(lo, n), col))
        yield _assemble(pieces, n)
