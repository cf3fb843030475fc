"""A column of a PostgreSQL table as the catalog describes it (no Arrow: the worker that only
commits a write loads this, never the COPY encoders)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PgColumn"]


@dataclass(frozen=True)
class PgColumn:
    """A column of the target table, as the catalog describes it.

    Attributes:
        name: exact column name.
        base_type: ``pg_type.typname`` of the column's type, domains resolved to their
            base type (``int4``, ``text``, ``timestamptz``...).
        display_type: the type as ``format_type`` prints it (``character varying(20)``).
        kind: ``pg_type.typtype`` of the base type (``b`` base, ``e`` enum, ...).
        category: ``pg_type.typcategory`` (``A`` for arrays).
        not_null: the column is ``NOT NULL``.
        has_default: the column has a default, is an identity or generated column.
        generated: the column is ``GENERATED ALWAYS AS (...) STORED`` (cannot be written).
    """

    name: str
    base_type: str
    display_type: str
    kind: str = "b"
    category: str = ""
    not_null: bool = False
    has_default: bool = False
    generated: bool = False
