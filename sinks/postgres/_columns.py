"""Columns of a PostgreSQL table as the COPY encoders see them, and the rules both COPY formats
share: which Arrow types fit, how arrays are normalised, and the refusal of text with NUL bytes."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from twopc import ConfigurationError, SinkError

from ..sql._json_values import is_nested, json_texts
from ..sql._type_rules import Family, fits
from ._server import PgColumn

__all__ = ["FLOAT_PG", "INT_PG", "PgColumn", "assign", "check_no_nul", "compatible", "family", "is_binary", "is_string",
           "normalize_array", "value_bytes"]

INT_PG = frozenset({"int2", "int4", "int8"})
FLOAT_PG = frozenset({"float4", "float8"})


def is_string(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t)
            or getattr(pa.types, "is_string_view", lambda _t: False)(t))


def is_binary(t: pa.DataType) -> bool:
    return (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or getattr(pa.types, "is_binary_view", lambda _t: False)(t))


_FAMILIES: dict[str, Family] = {
    **dict.fromkeys(INT_PG, Family.INT), **dict.fromkeys(FLOAT_PG, Family.FLOAT), "numeric": Family.DECIMAL,
    "bool": Family.BOOL, **dict.fromkeys(("text", "varchar", "bpchar", "name", "citext"), Family.TEXT),
    **dict.fromkeys(("json", "jsonb"), Family.JSON), **dict.fromkeys(("uuid", "xml"), Family.PARSED_TEXT),
    "bytea": Family.BINARY,
    "date": Family.DATE, "timestamp": Family.TIMESTAMP, "timestamptz": Family.TIMESTAMP, "time": Family.TIME,
}


def family(col: PgColumn) -> Family:
    """The type-rule family of a PostgreSQL column (enums are parsed text)."""
    if col.category == "A":
        return Family.OTHER
    return Family.PARSED_TEXT if col.kind == "e" else _FAMILIES.get(col.base_type, Family.OTHER)


def compatible(arrow_type: pa.DataType, col: PgColumn) -> bool:
    return fits(arrow_type, family(col))


def normalize_array(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Plain Arrow arrays from chunks, dictionaries and views; nested values as their JSON text."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if is_nested(arr.type):
        return json_texts(arr)
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


def assign(name: str, arr: pa.Array, col: PgColumn) -> pa.Array:
    """*arr* as PostgreSQL's assignment cast would make it for *col* where COPY would not: floats (half to even) and
    decimals (half away from zero) rounded into an integer column; SinkError on NaN, infinite or out of range."""
    if family(col) is not Family.INT or not (pa.types.is_floating(arr.type) or pa.types.is_decimal(arr.type)):
        return arr
    mode = "half_to_even" if pa.types.is_floating(arr.type) else "half_towards_infinity"
    try:
        return pc.round(arr, 0, round_mode=mode).cast(pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise SinkError(f"column {name!r}: a value is NaN, infinite or out of range for PostgreSQL type "
                        f"{col.display_type}") from None


_NUL_SCAN = 1 << 20


def check_no_nul(name: str, arr: pa.Array) -> None:
    if not is_string(arr.type) or len(arr) == 0 or arr.null_count == len(arr):
        return
    # a memchr-speed scan of the bytes first; a hit may lie in a null slot, so it is checked value by value
    data = value_bytes(arr)
    if not any(b"\x00" in data[i:i + _NUL_SCAN].tobytes() for i in range(0, len(data), _NUL_SCAN)):
        return
    if (idx := pc.index(pc.match_substring(arr, "\x00"), True).as_py()) < 0:
        return  # every NUL byte lies in a null slot
    raise ConfigurationError(
        f"column {name!r}: the value in row {idx} of this batch contains a NUL byte (\\x00), which PostgreSQL text "
        f"cannot store. Remove it before writing, e.g. F.regexp_replace(F.col({name!r}), '\\\\x00', '')"
    )


def value_bytes(rows: pa.Array) -> memoryview:
    """The bytes of every value of a binary-like array, concatenated (zero copy)."""
    n = len(rows)
    bufs = rows.buffers()
    large = pa.types.is_large_binary(rows.type) or pa.types.is_large_string(rows.type)
    offsets = memoryview(bufs[1]).cast("q" if large else "i")
    start, end = offsets[rows.offset], offsets[rows.offset + n]
    return memoryview(bufs[2])[start:end] if bufs[2] is not None else memoryview(b"")
