"""The DataFrame-to-SQL type mapping for tables twopc creates (``createTableColumnTypes`` overrides
it per column, verbatim), as the manual's twopc-jdbc page tabulates it (``docs/formats/jdbc.md``):
SQLAlchemy's generic types, or a dialect's own :attr:`~twopc.sinks.sql._registry.SqlDatabase.arrow_types`;
arrays, maps and structs are stored as JSON (:mod:`twopc.sinks.sql._json_values`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from twopc import ConfigurationError
from twopc.spi import SchemaMismatchError

from ._json_values import is_nested
from ._names import TableName
from ._registry import dialect_for

__all__ = ["arrow_to_sqlalchemy", "column_ddl", "create_table_sql"]


#: SQLAlchemy's generic column type per Arrow type, first match wins
_GENERIC: tuple[tuple[Callable[[pa.DataType], bool], Callable[[Any], sa.types.TypeEngine[Any]]], ...] = (
    (lambda t: pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t), lambda t: sa.SmallInteger()),
    (lambda t: pa.types.is_int32(t) or pa.types.is_uint16(t), lambda t: sa.Integer()),
    (lambda t: pa.types.is_int64(t) or pa.types.is_uint32(t), lambda t: sa.BigInteger()),
    (pa.types.is_float32, lambda t: sa.REAL()),
    (pa.types.is_float64, lambda t: sa.Double()),
    (pa.types.is_decimal, lambda t: sa.Numeric(t.precision, t.scale)),
    (pa.types.is_boolean, lambda t: sa.Boolean(create_constraint=False)),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), lambda t: sa.Text()),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), lambda t: sa.LargeBinary()),
    (pa.types.is_date, lambda t: sa.Date()),
    (pa.types.is_timestamp, lambda t: sa.DateTime(timezone=t.tz is not None)),
    (is_nested, lambda t: sa.JSON()),
)


def arrow_to_sqlalchemy(field: pa.Field, dialect: str) -> sa.types.TypeEngine[Any]:
    """The column type twopc creates for an Arrow field on backend *dialect* (the module table). Raises
    ``SchemaMismatchError``: the type has no SQL column type (unions, intervals...)."""
    t = field.type
    kind = _kind(t)
    if kind is not None and (own := dialect_for(dialect).arrow_types.get(kind)) is not None:
        return own
    made = next((make(t) for is_type, make in _GENERIC if is_type(t)), None)
    if made is not None:
        return made
    raise SchemaMismatchError(
        f"column {field.name}: Spark type {t} has no SQL column type twopc can create; convert it "
        f"or set createTableColumnTypes")


def _kind(t: pa.DataType) -> str | None:
    """The key of :attr:`~twopc.sinks.sql._registry.SqlDatabase.arrow_types` for *t*."""
    checks = (("float32", pa.types.is_float32), ("float64", pa.types.is_float64),
              ("string", lambda x: pa.types.is_string(x) or pa.types.is_large_string(x)),
              ("binary", lambda x: pa.types.is_binary(x) or pa.types.is_large_binary(x)),
              ("timestamp", pa.types.is_timestamp), ("nested", is_nested))
    return next((kind for kind, pred in checks if pred(t)), None)


def column_ddl(field: pa.Field, dialect: Dialect, overrides: Mapping[str, str]) -> str:
    """``"name" TYPE`` for CREATE TABLE (``createTableColumnTypes`` wins; non-nullable: NOT NULL)."""
    q = dialect.identifier_preparer.quote_identifier
    override = next((v for k, v in overrides.items() if k.lower() == field.name.lower()), None)
    type_sql = override if override is not None else arrow_to_sqlalchemy(field, dialect.name).compile(dialect=dialect)
    return f"{q(field.name)} {type_sql}" + ("" if field.nullable else " NOT NULL")


def create_table_sql(table: TableName, schema: pa.Schema, dialect: Dialect, *,
                     overrides: Mapping[str, str] | None = None) -> str:
    """``CREATE TABLE`` for *schema*, column types as *overrides* (``createTableColumnTypes``) say. Raises
    ``SchemaMismatchError``: a column type cannot be mapped; ``ConfigurationError``: ``createTableColumnTypes`` names a
    column the DataFrame lacks."""
    ov = dict(overrides or {})
    names = {f.name.lower() for f in schema}
    unknown = [k for k in ov if k.lower() not in names]
    if unknown:
        raise ConfigurationError(
            f"createTableColumnTypes names columns the DataFrame does not have: {', '.join(unknown)}; "
            f"DataFrame columns: {', '.join(schema.names)}")
    cols = [column_ddl(f, dialect, ov) for f in schema]
    return f"CREATE TABLE {table.quoted(dialect)} ({', '.join(cols)})"
