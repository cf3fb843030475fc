"""Rows PostgreSQL refuses (SQLSTATE classes 22 and 23): name them, or route them to a dead-letter table.
:class:`CheckedCopy` wraps the transaction's COPY: without ``deadLetterTable`` it keeps the ``stream``
and ``id`` columns of the open COPY's batches to name the refused row's entry; with one it keeps the
batches, and on a refused row rolls back to a savepoint and loads them again in halves, down to the
single failing rows, which become dead-letter rows in the same transaction. A COPY ends once its
batches reach :data:`SETTLE_BYTES`, which bounds what a task keeps."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from twopc import SinkError, TransactionContext

from .._entry import ENTRY_COLUMNS, entry_name
from ..sql._json_values import jsonable
from ..sql._names import TableName
from ._columns import PgColumn
from ._copy import CopyPlan, CopyStream, identifier

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DEAD_LETTER_COLUMNS", "CheckedCopy", "dead_letter_ddl", "is_refused_row", "wrong_dead_letter_types"]

log = logging.getLogger("twopc.sinks.postgres")

#: the columns of a dead-letter table
DEAD_LETTER_COLUMNS = ("sink_id", "batch_id", "partition_id", "stream", "entry_id", "reason", "row")
_LINE = re.compile(r"COPY .*?, line (\d+)")
#: by column: (the type twopc creates, the base types that take its values; any text type takes text)
_TYPES = {"sink_id": ("text", ()), "batch_id": ("bigint", ("int8", "numeric")),
          "partition_id": ("integer", ("int4", "int8", "numeric")), "stream": ("text", ()), "entry_id": ("text", ()),
          "reason": ("text", ()), "row": ("jsonb", ("jsonb", "json"))}


def is_refused_row(exc: BaseException) -> bool:
    """Whether *exc* is a data exception (class 22) or an integrity violation (class 23)."""
    return isinstance(exc, psycopg.Error) and (exc.sqlstate or "")[:2] in ("22", "23")


def dead_letter_ddl(table: TableName) -> sql.Composed:
    return sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (sink_id text NOT NULL, batch_id bigint NOT NULL, partition_id int NOT NULL, "
        "stream text, entry_id text, reason text NOT NULL, row jsonb NOT NULL, "
        "failed_at timestamptz NOT NULL DEFAULT now())").format(identifier(table))


def wrong_dead_letter_types(table: TableName, columns: Sequence[PgColumn]) -> str | None:
    """Why the existing dead-letter *table* cannot take dead letters (each wrong column, its type,
    the expected one, and the fix); ``None`` when every column fits."""
    wrong = []
    for c in columns:
        expected, takes = _TYPES.get(c.name.lower(), ("", ()))
        text_ok = expected in ("text", "jsonb") and c.category == "S"
        if expected and c.base_type not in takes and not text_ok:
            wrong.append((c, expected))
    if not wrong:
        return None
    name = table.display()
    alters = ", ".join(f"ALTER COLUMN {q} TYPE {want} USING {q}::text" + ("" if want == "text" else f"::{want}")
                       for c, want in wrong for q in (sql.Identifier(c.name).as_string(None),))
    return (f"dead-letter table {name} has columns of the wrong type: "
            f"{', '.join(f'{c.name} {c.display_type} (expected {want})' for c, want in wrong)}; twopc writes "
            f"the sink id, stream, entry id and reason as text, the batch id as bigint, the partition as integer "
            f"and the row as jsonb. Change the columns (ALTER TABLE {name} {alters}), or drop the table so that "
            f"twopc creates it (or set option deadLetterTable to another name); nothing was written")


def _reason(exc: BaseException, redact: Callable[[str], str]) -> str:
    if isinstance(exc, psycopg.Error):
        from ._errors import diag  # a refused row's: a load that succeeds maps no error
        state, primary = diag(exc)
        where = exc.diag.context.splitlines()[0] if exc.diag.context else ""
        detail = f" ({exc.diag.message_detail})" if exc.diag.message_detail else ""
        return redact(f"{state} {primary}{detail}" + (f" [{where}]" if where else ""))[:2000]
    return redact(str(exc))[:2000]


#: Arrow bytes one COPY takes before it ends: bounds a task's memory, large enough that its round trip is noise
SETTLE_BYTES = 16 << 20


class CheckedCopy:
    """A :class:`CopyStream` whose refused rows are named, or dead-lettered (see the module) in *dead_letter*; *fail*
    maps a driver error and an action to the sink's :class:`SinkError`, *redact* removes secrets from a text."""

    def __init__(self, pg: psycopg.Connection[Any], table: TableName, context: TransactionContext, *,
                 dead_letter: TableName | None, fail: Callable[[BaseException, str], SinkError],
                 redact: Callable[[str], str]) -> None:
        self._pg = pg
        self._table = table
        self._stream = CopyStream(pg, table)
        self._context = context
        self._dead_letter = dead_letter
        self._fail = fail
        self._redact = redact
        self._kept: list[pa.RecordBatch] = []
        self._kept_bytes = 0
        self._plan: CopyPlan | None = None
        #: rows of this transaction routed to the dead-letter table
        self.dead = 0

    def write_batch(self, batch: pa.RecordBatch, plan: CopyPlan) -> None:
        """:meth:`CopyStream.write_batch`, keeping what naming or dead-lettering needs."""
        if self._kept and plan is not self._plan:
            self.end()  # the stream would start another COPY: settle this one first
        if not self._kept and self._dead_letter is not None:
            self._pg.execute("SAVEPOINT twopc_copy")
        self._plan = plan
        self._kept.append(batch if self._dead_letter is not None  # else only the columns that name its rows
                          else batch.select([n for n in ENTRY_COLUMNS if n in batch.schema.names]))
        self._kept_bytes += batch.nbytes
        try:
            self._stream.write_batch(batch, plan)
        except psycopg.Error as exc:
            self._settle(exc)
            return
        if self._kept_bytes >= SETTLE_BYTES:
            self.end()

    def write_rows(self, columns: Sequence[PgColumn], rows: Sequence[Sequence[Any]]) -> None:
        """:meth:`CopyStream.write_rows` (neither named nor dead-lettered)."""
        self.end()
        self._stream.write_rows(columns, rows)

    def end(self) -> None:
        """Finish the open COPY; a refused row is named or dead-lettered here (raises as :meth:`write_batch`)."""
        try:
            self._stream.end()
        except psycopg.Error as exc:
            self._settle(exc)
            return
        if self._kept and self._dead_letter is not None:
            self._pg.execute("RELEASE SAVEPOINT twopc_copy")
        self._kept, self._kept_bytes = [], 0

    def cancel(self, reason: BaseException | None = None) -> None:
        self._kept, self._kept_bytes = [], 0
        self._stream.cancel(reason)

    def drop(self) -> bool:
        self._kept, self._kept_bytes = [], 0
        return self._stream.drop()

    def _settle(self, exc: psycopg.Error) -> None:
        kept, self._kept, self._kept_bytes = self._kept, [], 0
        if not is_refused_row(exc) or not kept:
            raise exc
        if self._dead_letter is None:
            raise self._fail(exc, f"write {self._refused(exc, kept)} to {self._table.display()}") from None
        plan = self._plan
        assert plan is not None
        self._stream.cancel(exc)
        self._pg.execute("ROLLBACK TO SAVEPOINT twopc_copy")
        for batch in kept:
            self._split(batch, plan)
        self._pg.execute("RELEASE SAVEPOINT twopc_copy")

    def _refused(self, exc: psycopg.Error, kept: list[pa.RecordBatch]) -> str:
        if (m := _LINE.search(exc.diag.context or "")) is None:
            return "rows"
        line = int(m.group(1)) - 1
        for b in kept:
            if line < b.num_rows:
                return entry_name(b.slice(line, 1).to_pylist()[0])
            line -= b.num_rows
        return "rows"

    def _split(self, batch: pa.RecordBatch, plan: CopyPlan) -> None:
        """Load *batch* under a savepoint; on a refused row load its halves, down to single rows,
        which go to the dead-letter table."""
        self._pg.execute("SAVEPOINT twopc_part")
        try:
            self._stream.write_batch(batch, plan)
            self._stream.end()
        except psycopg.Error as exc:
            self._stream.cancel(exc)
            if not is_refused_row(exc):
                raise
            self._pg.execute("ROLLBACK TO SAVEPOINT twopc_part")
            self._pg.execute("RELEASE SAVEPOINT twopc_part")
            if batch.num_rows == 1:
                row = {f.name: jsonable(batch.column(i)[0].as_py(), f.type) for i, f in enumerate(batch.schema)}
                self._bury(row, _reason(exc, self._redact))
                return
            half = batch.num_rows // 2
            self._split(batch.slice(0, half), plan)
            self._split(batch.slice(half), plan)
            return
        self._pg.execute("RELEASE SAVEPOINT twopc_part")

    def _bury(self, row: dict[str, Any], reason: str) -> None:
        assert self._dead_letter is not None
        c = self._context
        stream, entry = (None if row.get(k) is None else str(row[k]) for k in ("stream", "id"))
        self._pg.execute(
            sql.SQL("INSERT INTO {} ({}) VALUES (%s, %s, %s, %s, %s, %s, %s)").format(
                identifier(self._dead_letter), sql.SQL(", ").join(sql.Identifier(n) for n in DEAD_LETTER_COLUMNS)),
            (c.sink_id, c.batch_id, c.partition_id, stream, entry, reason, json.dumps(_storable(row), default=str)))
        self.dead += 1
        log.warning("twopc postgres: %s of batch %s refused by %s, routed to dead-letter table %s "
                    "(%s so far in this task): %s", entry_name(row), c.batch_id, self._table.display(),
                    self._dead_letter.display(), self.dead, reason)


def _storable(v: Any) -> Any:
    """*v* with each NUL of its strings written as ``\\u0000`` (``jsonb`` cannot hold a NUL)."""
    if isinstance(v, str):
        return v.replace("\x00", "\\u0000")
    if isinstance(v, dict):
        return {k: _storable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_storable(x) for x in v]
    return v
