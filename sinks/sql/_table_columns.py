"""The staging mode's view of the written table's column types: the DataFrame is checked with the
same rule as the prepared modes (:mod:`twopc.sinks.sql._type_rules`, through the catalog reader
of PostgreSQL and MariaDB/MySQL), and the staging table takes the written table's own column types,
so that staged rows are converted exactly as the prepared modes convert them and the move
into the written table converts nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ._column_match import TableColumn, match_columns
from ._names import TableName
from ._registry import dialect_for
from ._staging_statements import ReflectedColumn

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy.engine import Connection

__all__ = ["VerbatimType", "check_columns", "same_type"]



class VerbatimType(sa.types.UserDefinedType[Any]):
    """A column type given as DDL text (a type read from the catalog)."""

    cache_ok = True

    def __init__(self, ddl: str) -> None:
        self.ddl = ddl

    def get_col_spec(self, **kw: Any) -> str:
        return self.ddl


def check_columns(conn: Connection, table: TableName, schema: pa.Schema) -> Sequence[TableColumn]:
    """*table*'s columns matched to the DataFrame's (in its order), after checking that
    the DataFrame fits them with the rule every mode shares (names, types, required
    columns).

    Raises:
        SchemaMismatchError: listing every problem.
    """
    dialect = dialect_for(conn.dialect.name)
    cols: Sequence[Any] | None = dialect.catalog_columns(conn.connection.driver_connection, table)
    if cols is None:
        cols = [ReflectedColumn.of(dict(c)) for c in sa.inspect(conn).get_columns(table.name, schema=table.schema)]
    return match_columns(schema.names, [f.type for f in schema], cols, table.display(),
                         compatible=dialect.compatible or _reflected_fits, type_name=str,
                         check_required=True)


def _reflected_fits(t: pa.DataType, col: Any) -> bool:
    from ._type_rules import fits, reflected_family  # here: a commit never loads pyarrow

    return fits(t, reflected_family(col.type), untyped=True)


def same_type(a: str, b: str, dialect: str) -> bool:
    """Whether two spellings of a column type are the same type: DDL as SQLAlchemy compiles
    it (``NUMERIC(22, 1)``, ``BIGINT``, ``BOOL``) and as the catalog prints it
    (``numeric(22,1)``, MariaDB's ``bigint(20)``, ``tinyint(1)``)."""
    normalize = dialect_for(dialect).normalize_type
    return normalize(a) == normalize(b)
