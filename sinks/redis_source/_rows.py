"""What an entry becomes: the row schema and the typed-field parsing.

Every row has ``stream STRING, id STRING, timestamp TIMESTAMP`` (the id's milliseconds),
``fields MAP<STRING, STRING>``, then one column per ``fieldsSchema`` column, parsed from
the same-named field (missing: null). A value that does not parse fails the task with
the stream, the entry id and the field named.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from twopc import ConfigurationError
from twopc.spi import SourceError

__all__ = ["BASE_COLUMNS", "BASE_DDL", "Converter", "converters", "schema_ddl", "to_batch", "to_row"]

BASE_DDL = "stream STRING, id STRING, timestamp TIMESTAMP, fields MAP<STRING, STRING>"
BASE_COLUMNS = ("stream", "id", "timestamp", "fields")

Converter = Callable[[str], Any]

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


def _decimal(v: str) -> Decimal:
    try:
        return Decimal(v.strip())
    except InvalidOperation:
        raise ValueError(v) from None


_BY_TYPE: dict[str, Converter] = {
    "string": str, "long": int, "integer": int, "short": int, "byte": int,
    "double": float, "float": float, "boolean": _bool, "date": dt.date.fromisoformat,
    "timestamp": _timestamp, "timestamp_ntz": dt.datetime.fromisoformat, "binary": lambda v: v.encode("utf-8"),
    "decimal": _decimal,
}


def schema_ddl(fields_schema: str) -> str:
    """The DDL of the source's rows."""
    return BASE_DDL + (f", {fields_schema}" if fields_schema.strip() else "")


def converters(schema: Any) -> tuple[tuple[str, str], ...]:
    """(field name, type name) of the typed columns of *schema* (a ``StructType``),
    checked once on the driver (the pairs pickle to executors).

    Raises:
        ConfigurationError: a typed column's type cannot be parsed from a string.
    """
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
    """The row of one entry.

    Raises:
        SourceError: a field is not UTF-8, or a typed field does not parse.
    """
    eid = entry_id.decode("ascii")
    try:
        text = {k.decode("utf-8"): v.decode("utf-8") for k, v in fields.items()}
    except UnicodeDecodeError:
        raise SourceError(f"entry {eid} of stream {stream!r} has a field that is not UTF-8 text") from None
    ms = int(eid.split("-", 1)[0])
    row: list[Any] = [stream, eid, dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC), text]
    for name, kind in typed:
        raw = text.get(name)
        if raw is None:
            row.append(None)
            continue
        try:
            row.append(_BY_TYPE[kind](raw))
        except (ValueError, OverflowError):
            raise SourceError(f"entry {eid} of stream {stream!r}: field {name!r} = {raw!r:.60} is not a {kind} "
                              f"(fieldsSchema); fix the producer, or declare the column STRING and parse it "
                              f"in the query") from None
    return tuple(row)


def to_batch(rows: Sequence[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    """*rows* (from :func:`to_row`) as one Arrow batch of *schema*: the source's rows as
    Spark's ``to_arrow_schema`` of the reader's schema has them, so the Python worker sends
    the batch as it is instead of converting value by value."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.RecordBatch.from_arrays([pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)],
                                      schema=schema)
