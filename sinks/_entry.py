"""How an error or a dead letter names one row: by its stream entry when it has one.

Rows of ``twopc-redis-stream`` carry ``stream`` and ``id`` (the entry id); a sink that refuses
a row names it by them, so the user can find the entry (``XRANGE <stream> <id> <id>``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ENTRY_COLUMNS", "entry_name"]

ENTRY_COLUMNS = ("stream", "id")  #: the columns that name a row's entry


def entry_name(row: Mapping[str, Any]) -> str:
    """``entry <stream> <id>``, ``row id=<id>`` (no stream), or ``a row``."""
    if row.get("stream") is not None and row.get("id") is not None:
        return f"entry {row['stream']} {row['id']}"
    if row.get("id") is not None:
        return f"row id={row['id']}"
    return "a row"
