"""Which DataFrame (Arrow) types may be written to which table columns, for every SQL sink: each backend sorts its
columns into a :class:`Family`, and :func:`fits` answers from :data:`RULES`, which follows what Spark's JDBC writer gets
through (the README's type table lists the exceptions); arrays, maps and structs fit JSON columns only."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import pyarrow as pa

from ._json_values import is_nested

__all__ = ["RULES", "Family", "arrow_kind", "fits", "reflected_family", "spark_type_name"]


class Family(StrEnum):
    """What a column stores, as far as the type rules care."""

    INT = "integer"
    BIT = "bit"
    FLOAT = "floating point"
    DECIMAL = "decimal"
    BOOL = "boolean"
    TEXT = "text"
    PARSED_TEXT = "text-parsed"
    """a type read from text: uuid, xml, enums, sets, inet"""
    JSON = "json"
    """json, jsonb (PostgreSQL), JSON (MySQL; MariaDB's LONGTEXT checked by JSON_VALID)"""
    BINARY = "binary"
    DATE = "date"
    TIMESTAMP = "timestamp"
    TIME = "time"
    OTHER = "other"


_ALL = True  # fits on every database
_MY = False  # fits where the server casts implicitly (MySQL/MariaDB)

#: Arrow kind -> {column family: whether it fits everywhere (else: with implicit casts only)}
RULES: Mapping[str, Mapping[Family, bool]] = {
    "bool": {Family.BOOL: _ALL, Family.INT: _MY, Family.FLOAT: _MY, Family.DECIMAL: _MY},
    "int": {Family.INT: _ALL, Family.FLOAT: _ALL, Family.DECIMAL: _ALL, Family.BIT: _MY, Family.TEXT: _MY,
            Family.PARSED_TEXT: _MY, Family.JSON: _MY},
    "float": {Family.FLOAT: _ALL, Family.DECIMAL: _ALL, Family.INT: _ALL, Family.TEXT: _MY,
              Family.PARSED_TEXT: _MY, Family.JSON: _MY},
    "decimal": {Family.DECIMAL: _ALL, Family.FLOAT: _ALL, Family.INT: _ALL, Family.TEXT: _MY,
                Family.PARSED_TEXT: _MY, Family.JSON: _MY},
    "string": {Family.TEXT: _ALL, Family.PARSED_TEXT: _ALL, Family.JSON: _ALL, Family.BINARY: _MY, Family.BIT: _MY,
               Family.DECIMAL: _MY, Family.DATE: _MY, Family.TIMESTAMP: _MY, Family.TIME: _MY},
    "binary": {Family.BINARY: _ALL, Family.BIT: _MY},
    "date": {Family.DATE: _ALL, Family.TIMESTAMP: _ALL},
    "timestamp": {Family.TIMESTAMP: _ALL, Family.DATE: _MY},
    "time": {Family.TIME: _ALL},
    "duration": {Family.TIME: _MY},
    # arrays, maps and structs: JSON text, refused into text columns (to_json() says which text is meant)
    "nested": {Family.JSON: _ALL},
}


def arrow_kind(t: pa.DataType) -> str | None:
    """The rule key of an Arrow type; ``None`` for types no column takes (unions, intervals...)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    checks = (("null", pa.types.is_null), ("bool", pa.types.is_boolean), ("int", pa.types.is_integer),
              ("float", pa.types.is_floating), ("decimal", pa.types.is_decimal),
              ("string", lambda x: pa.types.is_string(x) or pa.types.is_large_string(x)
               or getattr(pa.types, "is_string_view", lambda _t: False)(x)),
              ("binary", lambda x: pa.types.is_binary(x) or pa.types.is_large_binary(x)
               or pa.types.is_fixed_size_binary(x) or getattr(pa.types, "is_binary_view", lambda _t: False)(x)),
              ("date", pa.types.is_date), ("timestamp", pa.types.is_timestamp), ("time", pa.types.is_time),
              ("duration", pa.types.is_duration), ("nested", is_nested))
    return next((kind for kind, pred in checks if pred(t)), None)


def fits(t: pa.DataType, family: Family, *, implicit_casts: bool = False, untyped: bool = False) -> bool:
    """Whether values of Arrow type *t* may be written to a column of *family* (*implicit_casts*:
    MySQL-like; *untyped*: unknown column types take anything). An all-null column fits anything."""
    kind = arrow_kind(t)
    if kind == "null" or (family is Family.OTHER and untyped):
        return True
    if kind is None:
        return False
    everywhere = RULES[kind].get(family)
    return everywhere is not None and (everywhere or implicit_casts)


def reflected_family(sqltype: Any) -> Family:
    """The family of a column type SQLAlchemy reflected."""
    import sqlalchemy as sa
    order: tuple[tuple[type[Any], Family], ...] = (
        (sa.Boolean, Family.BOOL), (sa.Integer, Family.INT), (sa.Float, Family.FLOAT),
        (sa.Numeric, Family.DECIMAL), (sa.Enum, Family.PARSED_TEXT), (sa.JSON, Family.JSON),
        (sa.Uuid, Family.PARSED_TEXT), (sa.String, Family.TEXT), (sa.LargeBinary, Family.BINARY),
        (sa.BINARY, Family.BINARY), (sa.VARBINARY, Family.BINARY), (sa.DateTime, Family.TIMESTAMP),
        (sa.Date, Family.DATE), (sa.Time, Family.TIME))
    return next((fam for cls, fam in order if isinstance(sqltype, cls)), Family.OTHER)


_SPARK_NAMES: tuple[tuple[Any, str], ...] = (
    (pa.types.is_int8, "TINYINT"), (pa.types.is_int16, "SMALLINT"), (pa.types.is_int32, "INT"),
    (pa.types.is_int64, "BIGINT"), (pa.types.is_float32, "FLOAT"), (pa.types.is_float64, "DOUBLE"),
    (pa.types.is_boolean, "BOOLEAN"), (pa.types.is_date, "DATE"), (pa.types.is_null, "VOID"),
)


def spark_type_name(t: pa.DataType) -> str:
    """Spark's SQL name of the type *t* came from (``MAP<STRING, STRING>``), else Arrow's."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_map(t):
        return f"MAP<{spark_type_name(t.key_type)}, {spark_type_name(t.item_type)}>"
    if pa.types.is_struct(t):
        return "STRUCT<" + ", ".join(f"{f.name}: {spark_type_name(f.type)}" for f in t) + ">"
    if is_nested(t):
        return f"ARRAY<{spark_type_name(t.value_type)}>"
    if (kind := arrow_kind(t)) in ("string", "binary"):
        return str(kind).upper()
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP" if t.tz is not None else "TIMESTAMP_NTZ"
    return next((name for pred, name in _SPARK_NAMES if pred(t)), str(t))
