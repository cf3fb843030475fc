"""Matching DataFrame columns to a table's columns, for every SQL sink."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from twopc.spi import SchemaMismatchError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["TableColumn", "match_columns"]


class TableColumn(Protocol):
    """What matching needs to know about a table column."""

    @property
    def name(self) -> str: ...
    @property
    def display_type(self) -> str: ...
    @property
    def not_null(self) -> bool: ...
    @property
    def has_default(self) -> bool: ...
    @property
    def generated(self) -> bool: ...


C = TypeVar("C", bound=TableColumn)


def match_columns(names: Sequence[str], types: Sequence[pa.DataType] | None, columns: Sequence[C], table: str, *,
                  compatible: Callable[[pa.DataType, C], bool] | None, type_name: Callable[[pa.DataType], str],
                  check_required: bool) -> list[C]:
    """Map DataFrame column names to table columns (exact, else unique case-insensitive match), checking types
    with *compatible* when it and *types* are given. Raises ``SchemaMismatchError``: listing every unknown
    column, type mismatch and (*check_required*) NOT NULL column without default the DataFrame lacks."""
    by_name = {c.name: c for c in columns}
    by_lower: dict[str, list[C]] = {}
    for c in columns:
        by_lower.setdefault(c.name.lower(), []).append(c)
    problems: list[str] = []
    out: list[C] = []
    used: set[str] = set()
    for i, n in enumerate(names):
        cands = by_lower.get(n.lower(), [])
        if (col := by_name.get(n) or (cands[0] if len(cands) == 1 else None)) is None:
            problems.append(f"column {n}: not in table {table}")
            continue
        if col.name in used:
            problems.append(f"column {n}: maps to table column {col.name} twice")
            continue
        used.add(col.name)
        if col.generated:
            problems.append(f"column {n}: table column {col.name} is generated and cannot be written")
        elif compatible is not None and types is not None and not compatible(types[i], col):
            problems.append(_mismatch(n, types[i], col, type_name))
        out.append(col)
    if check_required:
        problems += [f"column {c.name}: NOT NULL without default in {table} but absent from the DataFrame"
                     for c in columns if c.name not in used and c.not_null and not c.has_default]
    if problems:
        cols = ", ".join(f"{c.name} {c.display_type}" for c in columns)
        raise SchemaMismatchError(
            f"the DataFrame does not fit table {table}: " + "; ".join(problems) + f". Table columns: {cols}")
    return out


def _mismatch(name: str, t: pa.DataType, col: TableColumn, type_name: Callable[[pa.DataType], str]) -> str:
    """One type mismatch; for an array, map or struct, with the fix."""
    from ._json_values import is_nested  # here: a worker that only commits never loads pyarrow
    from ._type_rules import spark_type_name
    if not is_nested(t):
        return f"column {name}: DataFrame type {type_name(t)}, table type {col.display_type}"
    return (f"column {name}: DataFrame type {spark_type_name(t)}, table type {col.display_type}; arrays, maps and "
            f"structs are written as JSON into JSON columns only: make {col.name} jsonb (or json) on PostgreSQL, "
            f"JSON on MySQL/MariaDB, or write JSON text of your choosing with to_json({name})")
