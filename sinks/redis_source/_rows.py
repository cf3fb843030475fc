"""What an entry becomes: :data:`BASE_DDL` (timestamp: the id's milliseconds), then one column
per ``fieldsSchema`` column parsed from its field (missing: null; unparsable: the task fails)."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from twopc import ConfigurationError
from twopc.spi import SourceError

__all__ = ["BASE_COLUMNS", "BASE_DDL", "converters", "entries_batch", "schema_ddl", "to_batch", "to_row"]

BASE_DDL = "stream STRING, id STRING, timestamp TIMESTAMP, fields MAP<STRING, STRING>"
BASE_COLUMNS = ("stream", "id", "timestamp", "fields")

#: The last millisecond a Spark TIMESTAMP (microseconds in 64 bits) holds.
_MAX_MS = (2**63 - 1) // 1000

_TRUE, _FALSE = ("true", "1", "t", "yes"), ("false", "0", "f", "no")


def _bool(v: str) -> bool:
    low = v.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(v)


def _timestamp(v: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(v.strip())
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


_BY_TYPE: dict[str, Callable[[str], Any]] = {
    "string": str, "long": int, "integer": int, "short": int, "byte": int, "double": float, "float": float,
    "boolean": _bool, "date": dt.date.fromisoformat, "timestamp": _timestamp,
    "timestamp_ntz": dt.datetime.fromisoformat, "binary": lambda v: v.encode("utf-8"),
    "decimal": lambda v: Decimal(v.strip()),
}


def schema_ddl(fields_schema: str) -> str:
    """The DDL of the source's rows."""
    return BASE_DDL + (f", {fields_schema}" if fields_schema.strip() else "")


def converters(schema: Any) -> tuple[tuple[str, str], ...]:
    """(field, type name) of *schema*'s typed columns; ConfigurationError for an unparsable type."""
    out = []
    for f in list(schema.fields)[len(BASE_COLUMNS):]:
        name = f.dataType.typeName()
        if name not in _BY_TYPE:
            raise ConfigurationError(f"fieldsSchema column {f.name} has type {f.dataType.simpleString()}, which "
                                     f"cannot be parsed from a stream field; use one of STRING, BIGINT, INT, "
                                     f"DOUBLE, BOOLEAN, DECIMAL, DATE, TIMESTAMP, BINARY")
        out.append((f.name, name))
    return tuple(out)


def to_row(stream: str, entry_id: bytes, fields: dict[bytes, bytes],
           typed: Sequence[tuple[str, str]]) -> tuple[Any, ...]:
    """The row of one entry; SourceError for a field not UTF-8 or a typed field that does not parse."""
    eid = entry_id.decode("ascii")
    try:
        text = {k.decode("utf-8"): v.decode("utf-8") for k, v in fields.items()}
    except UnicodeDecodeError:
        raise SourceError(f"entry {eid} of stream {stream!r} has a field that is not UTF-8 text") from None
    ms = int(eid.split("-", 1)[0])
    if ms > _MAX_MS:
        raise SourceError(f"entry {eid} of stream {stream!r}: its id's milliseconds are past the last instant a "
                          f"Spark TIMESTAMP holds (year 294247); give the producer ids of milliseconds since 1970 "
                          f"(XADD with *)")
    row: list[Any] = [stream, eid, ms, text]
    for name, kind in typed:
        raw = text.get(name)
        try:
            row.append(None if raw is None else _BY_TYPE[kind](raw))
        except (ValueError, OverflowError, InvalidOperation):
            raise SourceError(f"entry {eid} of stream {stream!r}: field {name!r} = {raw!r:.60} is not a {kind} "
                              f"(fieldsSchema); fix the producer, or declare the column STRING and parse it "
                              f"in the query") from None
    return tuple(row)


def to_batch(rows: Sequence[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    """*rows* (from :func:`to_row`) as one Arrow batch of *schema* (Spark's Arrow schema of the rows)."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    arrays = [pa.array(col, type=f.type) if i != 2 else _timestamps(col, f.type)
              for i, (col, f) in enumerate(zip(columns, schema, strict=True))]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _timestamps(ms: Sequence[int], type_: pa.DataType) -> pa.Array:
    return pa.array(ms, pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(type_)


#: The texts Arrow parses in C as Python's ``int`` and ``float`` do (Arrow takes some Python
#: refuses, such as ``0x10``, and refuses some Python takes, such as `` 5`` and ``1_000``): a
#: column with any other text is parsed value by value in Python.
_DIGITS = {**dict.fromkeys(("long", "integer", "short", "byte"), r"^-?[0-9]+$"),
           **dict.fromkeys(("double", "float"), r"^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$")}


def _typed_column(raw: pa.StringArray, kind: str, type_: pa.DataType) -> pa.Array:
    if kind == "string":
        return raw
    digits = _DIGITS.get(kind)
    if digits is not None and pc.all(pc.match_substring_regex(raw, digits)).as_py() is not False:
        return pc.cast(pc.cast(raw, pa.float64()), type_) if kind == "float" else pc.cast(raw, type_)
    convert = _BY_TYPE[kind]
    return pa.array([None if v is None else convert(v) for v in raw.to_pylist()], type=type_)


def entries_batch(stream: str, entries: Sequence[tuple[bytes, dict[bytes, bytes]]],
                  typed: Sequence[tuple[str, str]], schema: pa.Schema) -> pa.RecordBatch:
    """:func:`to_batch` of :func:`to_row` of each of *entries*, built column by column; raises
    through that fallback, which names the entry."""
    ids = [e for e, _ in entries]
    dicts = [f for _, f in entries]
    try:
        keys = [k for f in dicts for k in f]
        values = [v for f in dicts for v in f.values()]
        offsets = [0, *itertools.accumulate(len(f) for f in dicts)]
        columns: list[pa.Array] = [
            pa.array([stream] * len(ids), pa.string()), pa.array(ids, pa.binary()).cast(pa.string()),
            _timestamps([int(e.partition(b"-")[0]) for e in ids], schema.field(2).type),
            pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(keys, pa.binary()).cast(pa.string()),
                                    pa.array(values, pa.binary()).cast(pa.string())),
        ]
        for (name, kind), f in zip(typed, list(schema)[len(BASE_COLUMNS):], strict=True):
            key = name.encode("utf-8")
            raw = pa.array([d.get(key) for d in dicts], pa.binary()).cast(pa.string())
            columns.append(_typed_column(raw, kind, f.type))
        return pa.RecordBatch.from_arrays(columns, schema=schema)
    except (pa.ArrowInvalid, ValueError, OverflowError, ArithmeticError):
        return to_batch([to_row(stream, e, f, typed) for e, f in entries], schema)
