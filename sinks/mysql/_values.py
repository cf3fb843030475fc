"""Values for MariaDB/MySQL: which Arrow types fit which columns, and the values the server would
mangle or reject, refused first. Writes run in UTC: timestamps go as naive UTC with microseconds."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from twopc import ConfigurationError

from ..sql._json_values import is_nested, json_text, json_texts
from ..sql._type_rules import Family, fits
from ._my_column import MyColumn

__all__ = ["check_value", "checked_array", "compatible", "family", "normalize_array", "staging_values"]


_FAMILIES: dict[str, Family] = {
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"), Family.INT),
    "bit": Family.BIT, **dict.fromkeys(("float", "double", "real"), Family.FLOAT),
    **dict.fromkeys(("decimal", "numeric"), Family.DECIMAL),
    **dict.fromkeys(("char", "varchar", "tinytext", "text", "mediumtext", "longtext"), Family.TEXT),
    **dict.fromkeys(("enum", "set", "uuid", "inet4", "inet6"), Family.PARSED_TEXT), "json": Family.JSON,
    **dict.fromkeys(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"), Family.BINARY),
    "date": Family.DATE, "datetime": Family.TIMESTAMP, "timestamp": Family.TIMESTAMP, "time": Family.TIME,
}


def family(col: MyColumn) -> Family:
    return _FAMILIES.get(col.data_type, Family.OTHER)


def compatible(t: pa.DataType, col: MyColumn) -> bool:
    return fits(t, family(col), implicit_casts=True)


def normalize_array(arr: pa.Array) -> pa.Array:
    """*arr* cast so that ``to_pylist()`` gives values pymysql can escape (naive UTC timestamps in
    microseconds, floats for halves, nested values as JSON text)."""
    if is_nested(arr.type):
        return json_texts(arr)
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if pa.types.is_timestamp(t):
        unit = "us" if t.unit == "ns" else t.unit
        if t.tz is not None or unit != t.unit:
            arr = arr.cast(pa.timestamp(unit), safe=False)  # tz-aware -> the UTC wall clock
    elif pa.types.is_time64(t) and t.unit == "ns":
        arr = arr.cast(pa.time64("us"), safe=False)
    elif pa.types.is_duration(t) and t.unit == "ns":
        arr = arr.cast(pa.duration("us"), safe=False)
    elif pa.types.is_float16(t):
        arr = arr.cast(pa.float32())
    return arr


def checked_array(arr: pa.Array, column: str, table: str) -> pa.Array:
    """*arr* normalized, refusing (ConfigurationError, naming the column) a string with a NUL byte
    or a NaN or infinite float, which MariaDB would mangle or reject."""
    arr = normalize_array(arr)
    t = arr.type
    if arr.null_count == len(arr):
        return arr
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if pc.any(pc.match_substring(arr, "\x00")).as_py():
            raise ConfigurationError(
                f"column {column!r}: a value contains a NUL byte (\\x00); twopc refuses to write it "
                f"to {table} (MySQL clients and tools truncate text there): remove it before writing")
    elif pa.types.is_floating(t) and (pc.any(pc.is_nan(arr)).as_py() or pc.any(pc.is_inf(arr)).as_py()):
        raise ConfigurationError(
            f"column {column!r}: a value is NaN or infinite, which MariaDB/MySQL cannot store; "
            f"replace it (e.g. with NULL) before writing to {table}")
    return arr


def staging_values(arr: pa.Array, column: str, table: str) -> list[Any]:
    """A column's values as the XA sink writes them, checked by its rules."""
    return list(checked_array(arr, column, table).to_pylist())


def check_value(value: Any, column: str, row: int, table: str) -> Any:
    """Check and convert one Python value of a dict row (see :func:`checked_array`)."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ConfigurationError(
                f"column {column!r}: the value of row {row} contains a NUL byte (\\x00); twopc refuses "
                f"to write it to {table}: remove it before writing")
    elif isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ConfigurationError(
                f"column {column!r}: the value of row {row} is {value!r}, which MariaDB/MySQL cannot "
                f"store; replace it (e.g. with None) before writing to {table}")
    elif isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    elif isinstance(value, dict | list | tuple):
        return json_text(value)
    return value
