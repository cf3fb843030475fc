"""What the prepared-transaction base needs to know about MariaDB/MySQL XA."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pymysql

from .._options import Duration
from ..sql._registry import DialectSpec
from ._errors import connect_failure, error_code, error_text, is_connection_error, is_missing_table, map_error
from ._my_column import MyColumn

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["MYSQL", "lock_seconds"]


def quote(name: str) -> str:
    """*name* as a MySQL identifier (backticks), ``%`` doubled for pymysql's formatting."""
    return ("`" + name.replace("`", "``") + "`").replace("%", "%%")


def lock_seconds(timeout: Duration) -> int:
    """``innodb_lock_wait_timeout`` for *timeout*: whole seconds, rounded up, at least 1."""
    return max(1, timeout.whole_seconds)


def compatible(t: pa.DataType, col: MyColumn) -> bool:
    """Whether a DataFrame column of type *t* can be written to *col*
    (:func:`twopc.sinks.mysql._values.compatible`, imported here: it needs pyarrow, which a
    worker that only commits never loads)."""
    from ._values import compatible as arrow_compatible

    return arrow_compatible(t, col)


def lock_timeout_text(timeout: Duration) -> str:
    """The lock wait in force: the server counts whole seconds."""
    return f"{lock_seconds(timeout)}s"


MYSQL = DialectSpec(
    name="mysql", format_name="MySqlXaSink", product="MariaDB/MySQL", id_name="XA transaction id",
    driver_error=pymysql.Error, quote=quote, connect_failure=connect_failure, is_connection_error=is_connection_error,
    is_missing_table=is_missing_table, error_code=error_code, error_text=error_text, compatible=compatible,
    map_error=map_error, lock_timeout_text=lock_timeout_text,
)
