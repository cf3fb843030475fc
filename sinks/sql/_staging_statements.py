"""The staging mode's tables and statements for any SQLAlchemy dialect, and the statement that
moves a batch's staged rows into the target (plain, or an upsert)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from twopc import ConfigurationError
from twopc.spi import SchemaMismatchError

from ._names import TableName
from ._registry import dialect_for
from ._staging_tables import TXN_COLUMN

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy.engine import Connection

__all__ = ["ReflectedColumn", "batches_table", "check_unique", "move_sql", "sql_string", "stage_table"]

def sql_string(text: str, *, backslash: bool) -> str:
    """A SQL string literal (for DDL that takes no bind parameters)."""
    if "\x00" in text:
        raise ConfigurationError("tableComment must not contain NUL bytes")
    body = text.replace("\\", "\\\\") if backslash else text
    return "'" + body.replace("'", "''") + "'"


def stage_table(stage: TableName, schema: pa.Schema, dialect_name: str,
                types: Mapping[str, sa.types.TypeEngine[Any]]) -> sa.Table:
    """The staging table for *schema*: the transaction id (defaulting to the dialect's :attr:`stage_txn_default`), then
    every column, nullable, of the target's *types* or the type twopc would create."""
    from ._arrow_ddl import arrow_to_sqlalchemy  # here: a commit never loads pyarrow
    txn_col = sa.Column(TXN_COLUMN, sa.String(200), nullable=False)
    if (default := dialect_for(dialect_name).stage_txn_default) is not None:
        txn_col = sa.Column(TXN_COLUMN, sa.Text(), nullable=False, server_default=sa.text(default))
    return sa.Table(stage.name, sa.MetaData(), txn_col,
                    *[sa.Column(f.name, types.get(f.name) or arrow_to_sqlalchemy(f, dialect_name), nullable=True)
                      for f in schema],
                    schema=stage.schema, mysql_engine="InnoDB")


def batches_table(batches: TableName) -> sa.Table:
    """The batch marker table: one row per committed batch of a sink."""
    return sa.Table(batches.name, sa.MetaData(),
                    sa.Column("sink_id", sa.String(64), primary_key=True),
                    sa.Column("batch_id", sa.BigInteger, primary_key=True, autoincrement=False),
                    sa.Column("rows", sa.BigInteger, nullable=False),
                    sa.Column("committed_at", sa.DateTime, nullable=False),
                    schema=batches.schema, mysql_engine="InnoDB")


@dataclass(frozen=True)
class ReflectedColumn:
    """A column as SQLAlchemy's inspector reflects it (a :class:`~twopc.sinks.sql._column_match.TableColumn`)."""

    name: str
    type: Any
    not_null: bool
    has_default: bool
    generated: bool

    @property
    def display_type(self) -> str:
        return str(self.type)

    @classmethod
    def of(cls, c: dict[str, Any]) -> ReflectedColumn:
        generated = c.get("computed") is not None
        has_default = (c.get("default") is not None or c.get("autoincrement") is True or generated
                       or c.get("identity") is not None)
        return cls(c["name"], c["type"], not c.get("nullable", True), has_default, generated)


def check_unique(conn: Connection, table: TableName, keys: Sequence[str]) -> None:
    """Raise :class:`SchemaMismatchError` unless a key or unique index of *table* covers exactly *keys*."""
    insp = sa.inspect(conn)
    want = {k.lower() for k in keys}
    sets: list[set[str]] = []
    pk = insp.get_pk_constraint(table.name, schema=table.schema)
    if pk and pk.get("constrained_columns"):
        sets.append({c.lower() for c in pk["constrained_columns"]})
    sets += [{c.lower() for c in u["column_names"]} for u in insp.get_unique_constraints(table.name, table.schema)]
    sets += [{c.lower() for c in ix["column_names"] if c} for ix in insp.get_indexes(table.name, table.schema)
             if ix.get("unique")]
    if want not in sets:
        raise SchemaMismatchError(
            f"upsertKeys ({', '.join(keys)}) need a primary key or unique constraint on exactly those columns of "
            f"{table.display()}: e.g. ALTER TABLE {table.display()} ADD UNIQUE ({', '.join(keys)})")


def move_sql(dialect_name: str, quote: Any, table: str, stage: str, mapping: Sequence[tuple[str, str]],
             upsert_keys: Sequence[str]) -> str:
    """The statement that moves the staged rows of the transactions bound as ``:ids`` from *stage* into
    *table*, *mapping* pairing their columns; with *upsert_keys* the dialect's upsert. Raises
    ``ConfigurationError``: upsert on a dialect without a known upsert syntax."""
    q = quote
    into = f"INSERT INTO {table} ({', '.join(q(tc) for _, tc in mapping)})"
    sel = ", ".join(q(sc) for sc, _ in mapping)
    source = f"FROM {stage} WHERE {q(TXN_COLUMN)} IN :ids"
    if not upsert_keys:
        return f"{into} SELECT {sel} {source}"
    keys = [next((tc for sc, tc in mapping if sc.lower() == k.lower()), k) for k in upsert_keys]
    keyset = {k.lower() for k in keys}
    others = [tc for _, tc in mapping if tc.lower() not in keyset]
    stage_keys = [sc for sc, tc in mapping if tc.lower() in keyset]
    if (sql := dialect_for(dialect_name).upsert_sql(into, sel, source, q, keys, others, stage_keys)) is not None:
        return sql
    raise ConfigurationError(f"upsertKeys is not supported on {dialect_name}")
