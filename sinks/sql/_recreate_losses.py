"""What dropping a table and re-creating it from the DataFrame (Spark's overwrite without
``truncate``) loses, read at validation so the user can keep the table with ``truncate=true``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ._arrow_ddl import arrow_to_sqlalchemy
from ._names import TableName
from ._registry import dialect_for
from ._table_columns import same_type

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy.engine import Connection

__all__ = ["recreate_losses"]


def recreate_losses(conn: Connection, table: TableName, schema: pa.Schema, *, overrides: Mapping[str, str],
                    keys: Sequence[str], comment: str) -> list[str]:
    """What *table* has that a ``CREATE TABLE`` from *schema* (with *overrides*, a key on *keys*, *comment*) will not
    give back, as short phrases (``"primary key (id)"``, ``"comment"``...). Raises ``SQLAlchemyError``: the catalog
    could not be read."""
    insp = sa.inspect(conn)
    name, sch = table.name, table.schema
    fields = {f.name.lower(): f for f in schema}
    cols = insp.get_columns(name, schema=sch)
    kept = [c for c in cols if c["name"].lower() in fields]
    out: list[str] = []

    def add(what: str, names: Sequence[str]) -> None:
        if names:
            out.append(f"{what} {', '.join(names)}")

    gone = [c["name"] for c in cols if c["name"].lower() not in fields]
    if gone:
        out.append(f"column{'s' if len(gone) > 1 else ''} {', '.join(gone)} (not in the DataFrame)")
    pk = insp.get_pk_constraint(name, schema=sch).get("constrained_columns") or []
    if pk and [k.lower() for k in pk] != [k.lower() for k in keys]:
        out.append(f"primary key ({', '.join(pk)})")
    add("unique constraint", [_described(u) for u in insp.get_unique_constraints(name, schema=sch)])
    add("index", [str(ix["name"]) for ix in insp.get_indexes(name, schema=sch) if not ix.get("duplicates_constraint")])
    add("check constraint", [str(ck.get("name") or ck.get("sqltext")) for ck in
                             _optional(lambda: insp.get_check_constraints(name, schema=sch))])
    add("foreign key", [_described(fk) for fk in insp.get_foreign_keys(name, schema=sch)])
    add("NOT NULL on", [c["name"] for c in kept if not c["nullable"] and fields[c["name"].lower()].nullable
                        and c["name"].lower() not in {k.lower() for k in keys}])
    add("default of", [c["name"] for c in kept if c.get("default") is not None or c.get("identity")])
    add("column type of", _changed_types(conn, kept, fields, overrides))
    table_comment = (_optional(lambda: [insp.get_table_comment(name, schema=sch)]) or [{}])[0].get("text")
    if table_comment and table_comment != comment:
        out.append("comment")
    add("comment of", [c["name"] for c in kept if c.get("comment")])
    out += dialect_for(conn.dialect.name).recreate_losses(conn, table.quoted(conn.dialect))
    return out


def _described(constraint: Mapping[str, Any]) -> str:
    cols = ", ".join(constraint.get("constrained_columns") or constraint.get("column_names") or [])
    return f"{constraint.get('name') or ''} ({cols})".strip()


def _optional(read: Callable[[], list[Any]]) -> list[Any]:
    try:
        return read()
    except NotImplementedError:
        return []


def _changed_types(conn: Connection, kept: Sequence[Mapping[str, Any]], fields: Mapping[str, pa.Field],
                   overrides: Mapping[str, str]) -> list[str]:
    """``name (old -> new)`` for each column whose re-created type differs."""
    given = {k.lower() for k in overrides}
    out = []
    for c in kept:
        key = c["name"].lower()
        if key in given:
            continue
        new = arrow_to_sqlalchemy(fields[key], conn.dialect.name).compile(dialect=conn.dialect)
        old = str(c["type"])
        with contextlib.suppress(Exception):  # an unreflectable type (NullType) keeps its catalog text
            old = c["type"].compile(dialect=conn.dialect)
        if not same_type(old, new, conn.dialect.name):
            out.append(f"{c['name']} ({old.lower()} -> {new.lower()})")
    return out
