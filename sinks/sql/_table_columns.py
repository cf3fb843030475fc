"""The staging mode's view of the target's column types: the DataFrame is checked with the prepared
modes' rule, and the staging table takes the target's types, so the move converts nothing."""

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
    """*table*'s columns matched to the DataFrame's (in its order), checked by every mode's rule. Raises
    ``SchemaMismatchError``: listing every problem."""
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
    """Whether a compiled type (``NUMERIC(22, 1)``) and a catalog one (``numeric(22,1)``) are the same."""
    normalize = dialect_for(dialect).normalize_type
    return normalize(a) == normalize(b)
