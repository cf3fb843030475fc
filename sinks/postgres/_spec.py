"""What the prepared-transaction base needs to know about PostgreSQL."""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg

from .._options import Duration
from ..sql._registry import DialectSpec
from ._errors import connect_failure, error_code, error_text, is_connection_error, is_missing_table, map_error

if TYPE_CHECKING:
    import pyarrow as pa

    from ._pg_column import PgColumn

__all__ = ["POSTGRES"]


def quote(name: str) -> str:
    """*name* as a PostgreSQL identifier, ``%`` doubled for a statement with parameters."""
    return ('"' + name.replace('"', '""') + '"').replace("%", "%%")


def compatible(t: pa.DataType, col: PgColumn) -> bool:
    """Whether a DataFrame column of type *t* can be written to *col*
    (:func:`twopc.sinks.postgres._columns.compatible`, imported here: it needs pyarrow, which a
    worker that only commits never loads)."""
    from ._columns import compatible as arrow_compatible

    return arrow_compatible(t, col)


def lock_timeout_text(timeout: Duration) -> str:
    """PostgreSQL's ``lock_timeout`` is the duration as given (milliseconds precision)."""
    return str(timeout)


POSTGRES = DialectSpec(
    name="postgresql", format_name="twopc-postgres", product="PostgreSQL", id_name="GID", driver_error=psycopg.Error,
    quote=quote, connect_failure=connect_failure, is_connection_error=is_connection_error,
    is_missing_table=is_missing_table, error_code=error_code, error_text=error_text, compatible=compatible,
    map_error=map_error, lock_timeout_text=lock_timeout_text,
)
