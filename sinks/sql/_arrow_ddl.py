"""The DataFrame-to-SQL type mapping for tables twopc creates, for any dialect.

Type mapping for tables twopc creates (``createTableColumnTypes`` overrides it per
column, verbatim):

==========================  ====================  ==================  ==========
Spark (Arrow)               PostgreSQL            MySQL / MariaDB     SQLite
==========================  ====================  ==================  ==========
ByteType, ShortType         SMALLINT              SMALLINT            INTEGER
IntegerType                 INTEGER               INTEGER             INTEGER
LongType                    BIGINT                BIGINT              INTEGER
FloatType                   REAL                  FLOAT               REAL
DoubleType                  DOUBLE PRECISION      DOUBLE              REAL
DecimalType(p, s)           NUMERIC(p, s)         DECIMAL(p, s)       NUMERIC
BooleanType                 BOOLEAN               BOOL                BOOLEAN
StringType                  TEXT                  LONGTEXT            TEXT
BinaryType                  BYTEA                 LONGBLOB            BLOB
DateType                    DATE                  DATE                DATE
TimestampType               TIMESTAMPTZ           DATETIME(6) (UTC)   DATETIME (UTC)
TimestampNTZType            TIMESTAMP             DATETIME(6)         DATETIME
ArrayType, MapType,         JSONB                 JSON                JSON
StructType
==========================  ====================  ==================  ==========

Arrays, maps and structs are stored as JSON (:mod:`twopc.sinks.sql._json_values`); MariaDB's
``JSON`` is ``LONGTEXT`` with a ``JSON_VALID`` check.
"""

from __future__ import annotations

from collections.abc import Mapping
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


def arrow_to_sqlalchemy(field: pa.Field, dialect: str) -> sa.types.TypeEngine[Any]:
    """The column type twopc creates for an Arrow field on *dialect* (a SQLAlchemy backend
    name: the dialect's :attr:`~twopc.sinks.sql._registry.SqlDatabase.arrow_types` first; see
    the module table).

    Raises:
        SchemaMismatchError: the type has no SQL column type (unions, intervals...).
    """
    t = field.type
    kind = _kind(t)
    if kind is not None and (own := dialect_for(dialect).arrow_types.get(kind)) is not None:
        return own
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return sa.SmallInteger()
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return sa.Integer()
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return sa.BigInteger()
    if pa.types.is_float32(t):
        return sa.REAL()
    if pa.types.is_float64(t):
        return sa.Double()
    if pa.types.is_decimal(t):
        return sa.Numeric(t.precision, t.scale)
    if pa.types.is_boolean(t):
        return sa.Boolean(create_constraint=False)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return sa.Text()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return sa.LargeBinary()
    if pa.types.is_date(t):
        return sa.Date()
    if pa.types.is_timestamp(t):
        return sa.DateTime(timezone=t.tz is not None)
    if is_nested(t):
        return sa.JSON()
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
    """``"name" TYPE`` for CREATE TABLE (``createTableColumnTypes`` wins, matched
    case-insensitively; a DataFrame column that is non-nullable gets NOT NULL)."""
    q = dialect.identifier_preparer.quote_identifier
    override = next((v for k, v in overrides.items() if k.lower() == field.name.lower()), None)
    type_sql = override if override is not None else arrow_to_sqlalchemy(field, dialect.name).compile(dialect=dialect)
    return f"{q(field.name)} {type_sql}" + ("" if field.nullable else " NOT NULL")


def create_table_sql(table: TableName, schema: pa.Schema, dialect: Dialect, *,
                     overrides: Mapping[str, str] | None = None) -> str:
    """``CREATE TABLE`` for *schema*, column types as *overrides* (``createTableColumnTypes``) say.

    Raises:
        SchemaMismatchError: a column type cannot be mapped.
        ConfigurationError: ``createTableColumnTypes`` names a column the DataFrame lacks.
    """
    ov = dict(overrides or {})
    names = {f.name.lower() for f in schema}
    unknown = [k for k in ov if k.lower() not in names]
    if unknown:
        raise ConfigurationError(
            f"createTableColumnTypes names columns the DataFrame does not have: {', '.join(unknown)}; "
            f"DataFrame columns: {', '.join(schema.names)}")
    cols = [column_ddl(f, dialect, ov) for f in schema]
    return f"CREATE TABLE {table.quoted(dialect)} ({', '.join(cols)})"
