"""One ``COPY ... FROM STDIN`` stream from Arrow, for both PostgreSQL commit modes. :func:`plan_copy`
picks binary or CSV (``copyFormat=auto``: binary when every column allows it); :class:`CopyStream`
keeps one COPY open across batches of one plan, so the client encodes a batch while the server parses
the one before; the server's verdict arrives at :meth:`CopyStream.end`."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import psycopg
from psycopg import sql

from twopc import ConfigurationError, SinkError

from ..sql._column_match import match_columns
from ..sql._names import TableName
from ._binary import BINARY_HEADER, BINARY_TRAILER, binary_supported, encode_binary
from ._columns import PgColumn, assign, compatible, normalize_array
from ._server import identifier, table_columns, table_oid

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy.engine import Connection

__all__ = ["CopyPlan", "CopyStream", "identifier", "plan_copy", "staging_copy"]

log = logging.getLogger("twopc.sinks.postgres")

#: bytes per ``Copy.write`` call
_WRITE_BYTES = 1 << 20


@dataclass(frozen=True)
class CopyPlan:
    """How batches of one Arrow schema are copied: into which columns, in which format."""

    columns: tuple[PgColumn, ...]
    binary: bool


def plan_copy(schema: pa.Schema, columns: Sequence[PgColumn],
              copy_format: Literal["auto", "binary", "csv"]) -> CopyPlan:
    """The plan for batches of *schema* whose fields map to *columns* (``copyFormat=binary``
    refuses a column it cannot encode)."""
    bad = [c.name for f, c in zip(schema, columns, strict=True) if not binary_supported(f.type, c)]
    if copy_format == "binary" and bad:
        raise ConfigurationError(f"copyFormat=binary cannot encode columns {bad}: use auto or csv")
    return CopyPlan(tuple(columns), copy_format == "binary" or (copy_format == "auto" and not bad))


class CopyStream:
    """A COPY into *table* on *pg*, opened on the first write, kept open while the plan stays the same."""

    def __init__(self, pg: psycopg.Connection[Any], table: TableName) -> None:
        self._pg = pg
        self._table = table
        #: the open COPY: (columns, binary), its cursor, the copy() context manager, the Copy
        self._open_copy: tuple[tuple[tuple[str, ...], bool], psycopg.Cursor[Any], Any, psycopg.Copy] | None = None

    def plan_for(self, schema: pa.Schema, copy_format: Literal["auto", "binary", "csv"]) -> CopyPlan:
        """The plan for *schema* into this table, its columns matched by name from the catalog (SinkError:
        no table; SchemaMismatchError: a column is missing or of another type)."""
        if (oid := table_oid(self._pg, self._table)) is None:
            raise SinkError(f"table {self._table.display()} does not exist")
        cols = match_columns(schema.names, [f.type for f in schema], table_columns(self._pg, oid),
                             self._table.display(), compatible=compatible, type_name=str, check_required=False)
        return plan_copy(schema, cols, copy_format)

    def write_batch(self, batch: pa.RecordBatch, plan: CopyPlan) -> None:
        """Encode *batch* (columns in ``plan.columns``) into the COPY; the server reports most errors at :meth:`end`."""
        copy = self._open(plan.columns, plan.binary)
        arrays = [assign(n, normalize_array(a), c)
                  for n, a, c in zip(batch.schema.names, batch.columns, plan.columns, strict=True)]
        if plan.binary:
            encode = encode_binary
        else:  # text COPY (copy_format csv, or a column without a binary form): its encoder loads then
            from ._csv import encode_csv
            encode = encode_csv
        for chunk in encode(arrays, batch.schema.names, plan.columns):
            for i in range(0, len(chunk), _WRITE_BYTES):
                copy.write(chunk[i:i + _WRITE_BYTES])

    def write_rows(self, columns: Sequence[PgColumn], rows: Sequence[Sequence[Any]]) -> None:
        """Copy Python rows (in *columns*' order) in a text COPY of their own, ending the open one."""
        self.end()
        with self._pg.cursor() as cur, cur.copy(self._copy_sql(columns, "text")) as copy:
            for row in rows:
                copy.write_row(row)

    def _open(self, columns: Sequence[PgColumn], binary: bool) -> psycopg.Copy:
        key = (tuple(c.name for c in columns), binary)
        if self._open_copy is not None and self._open_copy[0] == key:
            return self._open_copy[3]
        self.end()
        cursor = self._pg.cursor()
        context = cursor.copy(self._copy_sql(columns, "binary" if binary else "csv"))
        copy = context.__enter__()
        self._open_copy = (key, cursor, context, copy)
        if binary:
            copy.write(BINARY_HEADER)
        return copy

    def _copy_sql(self, columns: Sequence[PgColumn], fmt: str) -> sql.Composed:
        return sql.SQL("COPY {} ({}) FROM STDIN (FORMAT {})").format(
            identifier(self._table), sql.SQL(", ").join(sql.Identifier(c.name) for c in columns), sql.SQL(fmt))

    def end(self) -> None:
        """Finish the open COPY, if any; psycopg.Error when the server refused the rows."""
        state, self._open_copy = self._open_copy, None
        if state is None:
            return
        key, cursor, context, copy = state
        try:
            if key[1]:
                copy.write(BINARY_TRAILER)
            context.__exit__(None, None, None)
        finally:
            cursor.close()

    def cancel(self, reason: BaseException | None = None) -> None:
        """Abandon the open COPY (psycopg sends CopyFail); never raises."""
        state, self._open_copy = self._open_copy, None
        if state is None:
            return
        _key, cursor, context, _copy = state
        exc = reason if reason is not None else SinkError("transaction rolled back")
        try:
            context.__exit__(type(exc), exc, None)
        except Exception:
            log.debug("twopc postgres: cancelling a COPY into %s failed", self._table.display(), exc_info=True)
        with contextlib.suppress(Exception):  # closing the cursor of an abandoned COPY is best effort
            cursor.close()

    def drop(self) -> bool:
        """Forget the open COPY without talking to the (broken) server; whether one was open."""
        state, self._open_copy = self._open_copy, None
        return state is not None


def staging_copy(conn: Connection, table: TableName, txn_id: str) -> CopyStream:
    """A COPY stream into the staging *table*, whose trigger marks the rows with *txn_id*."""
    conn.exec_driver_sql("SELECT set_config('twopc.txn_id', %s, true)", (txn_id,))
    return CopyStream(conn.connection.driver_connection, table)  # type: ignore[arg-type]  # psycopg under SQLAlchemy
