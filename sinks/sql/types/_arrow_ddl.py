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

Arrays, maps and structs are stored as JSON (:mod:`twopc.sinks.sql.types._json_values`); MariaDB's
``JSON`` is ``LONGTEXT`` with a ``JSON_VALID`` check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.engine import Dialect

from twopc import ConfigurationError
from twopc.spi import SchemaMismatchError

from .._names import TableName
from ._json_values import is_nested

__all__ = ["arrow_to_sqlalchemy", "column_ddl", "create_table_sql"]


def arrow_to_sqlalchemy(field: pa.Field) -> sa.types.TypeEngine[Any]:
    """The column type twopc creates for an Arrow field (see the module table).

    Raises:
        SchemaMismatchError: the type has no SQL column type (unions, intervals...).
    """
    t = field.type
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return sa.SmallInteger()
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return sa.Integer()
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return sa.BigInteger()
    if pa.types.is_float32(t):
        return sa.REAL().with_variant(mysql.FLOAT(), "mysql", "mariadb")
    if pa.types.is_float64(t):
        return sa.Double().with_variant(postgresql.DOUBLE_PRECISION(), "postgresql").with_variant(
            mysql.DOUBLE(), "mysql", "mariadb")
    if pa.types.is_decimal(t):
        return sa.Numeric(t.precision, t.scale)
    if pa.types.is_boolean(t):
        return sa.Boolean(create_constraint=False)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return sa.LargeBinary().with_variant(postgresql.BYTEA(), "postgresql").with_variant(
            mysql.LONGBLOB(), "mysql", "mariadb")
    if pa.types.is_date(t):
        return sa.Date()
    if pa.types.is_timestamp(t):
        return sa.DateTime(timezone=t.tz is not None).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
    if is_nested(t):
        return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    raise SchemaMismatchError(
        f"column {field.name}: Spark type {t} has no SQL column type twopc can create; convert it "
        f"or set createTableColumnTypes")


def column_ddl(field: pa.Field, dialect: Dialect, overrides: Mapping[str, str]) -> str:
    """``"name" TYPE`` for CREATE TABLE (``createTableColumnTypes`` wins, matched
    case-insensitively; a DataFrame column that is non-nullable gets NOT NULL)."""
    q = dialect.identifier_preparer.quote_identifier
    override = next((v for k, v in overrides.items() if k.lower() == field.name.lower()), None)
    type_sql = override if override is not None else arrow_to_sqlalchemy(field).compile(dialect=dialect)
    return f"{q(field.name)} {type_sql}" + ("" if field.nullable else " NOT NULL")


def create_table_sql(table: TableName, schema: pa.Schema, dialect: Dialect, *,
                     overrides: Mapping[str, str] | None = None, options: str = "",
                     extra_columns: tuple[str, ...] = ()) -> str:
    """``CREATE TABLE`` for *schema* (Spark's JDBC writer semantics: ``options`` is
    appended verbatim, like ``createTableOptions``).

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
    cols = list(extra_columns) + [column_ddl(f, dialect, ov) for f in schema]
    tail = f" {options.strip()}" if options.strip() else ""
    return f"CREATE TABLE {table.quoted(dialect)} ({', '.join(cols)}){tail}"
