"""A column of a MariaDB/MySQL table (no Arrow: a worker that only commits loads this)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MyColumn"]


@dataclass(frozen=True)
class MyColumn:
    """A column from ``information_schema.COLUMNS``: ``data_type`` lower-case (``bigint``...),
    ``column_type`` in full for messages (``bigint(20) unsigned``)."""

    name: str
    data_type: str
    column_type: str
    not_null: bool
    has_default: bool
    generated: bool

    @property
    def display_type(self) -> str:
        return self.column_type
