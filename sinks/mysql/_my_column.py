"""A column of a MariaDB/MySQL table as ``information_schema.COLUMNS`` describes it (no Arrow:
the worker that only commits a write loads this, never the value checks)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MyColumn"]


@dataclass(frozen=True)
class MyColumn:
    """One column of the target table (from ``information_schema.COLUMNS``)."""

    name: str
    data_type: str
    """lower-case ``DATA_TYPE`` (``bigint``, ``varchar``, ``datetime``...)"""
    column_type: str
    """full ``COLUMN_TYPE`` for messages (``bigint(20) unsigned``)"""
    not_null: bool
    has_default: bool
    generated: bool

    @property
    def display_type(self) -> str:
        return self.column_type
