"""Rows into requests (executor side): one outbox line ``[key, method, url, body]`` per row, the URL template's
``{column}`` fields URL-encoded as path segments, the body the JSON row (or a column). The key hashes the sink id and
the row's ``keyColumn`` value, or else its place (batch, partition, position); made once at prepare and stored, it is
sent in every retry and re-delivery. A replayed undecided batch gets new positional keys, which is harmless (one
decision per batch id); only ``keyColumn`` survives a batch recomputed outside twopc. A content hash is not used: two
equal rows of a batch would share a key."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import math
import string
import urllib.parse
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from twopc import ConfigurationError

from .._entry import entry_name
from ._options import HttpOptions

__all__ = ["RequestMaker", "idempotency_key"]


def idempotency_key(sink_id: str, *, value: Any = None, place: tuple[int, int, int] | None = None) -> str:
    """A row's key: SHA-256 (32 hex digits) of *sink_id* and its key column's *value* or its *place*."""
    tail = ("p", *map(str, place)) if place is not None else ("k", value if isinstance(value, str) else _json(value))
    return hashlib.sha256("\0".join(("twopc-http", sink_id, *tail)).encode("utf-8")).hexdigest()[:32]


def _default(v: Any) -> Any:
    """JSON for what ``json`` does not know, as Spark's ``to_json`` writes it (a zoned timestamp as
    its UTC instant, decimals as full strings, durations as seconds, bytes as base64)."""
    if isinstance(v, dt.datetime):
        return (v.astimezone(dt.UTC) if v.tzinfo is not None else v).isoformat()
    if isinstance(v, dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, Decimal):
        return format(v, "f") if v.is_finite() else str(v)
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(v)).decode("ascii")
    return str(v)


def _finite(v: Any) -> Any:
    """*v* with NaN and infinities as the strings Spark's ``to_json`` writes."""
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_finite(x) for x in v]
    return v


def _json(v: Any) -> str:
    try:
        return json.dumps(v, default=_default, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(v), default=_default, separators=(",", ":"), ensure_ascii=False)


class RequestMaker:
    """Makes the outbox lines of one task attempt's rows."""

    def __init__(self, options: HttpOptions, sink_id: str, batch_id: int, partition_id: int) -> None:
        self.o = options
        self.sink_id = sink_id
        self.batch_id = batch_id
        self.partition_id = partition_id
        self.position = 0
        self._parts = [(text, name) for text, name, _, _ in string.Formatter().parse(options.url)]

    def check_columns(self, names: list[str]) -> None:
        """Refuse (ConfigurationError) rows that lack a column the options name."""
        if missing := [c for c in self.o.columns() if c not in names]:
            raise ConfigurationError(
                f"twopc-http: the written rows have no column(s) {', '.join(missing)}, which option url, "
                f"bodyColumn or keyColumn names (the rows have {', '.join(names)}): fix the option or select the "
                f"column; nothing was written")

    def lines(self, rows: list[dict[str, Any]]) -> Iterator[str]:
        """One outbox line per row (ConfigurationError: a row has a null key or URL value)."""
        for row in rows:
            yield json.dumps([self._key(row), self.o.method, self._url(row), self._body(row)],
                             separators=(",", ":"), ensure_ascii=False)
            self.position += 1

    def _key(self, row: Mapping[str, Any]) -> str:
        if (column := self.o.key_column) is None:
            return idempotency_key(self.sink_id, place=(self.batch_id, self.partition_id, self.position))
        if (value := row.get(column)) is None:
            raise ConfigurationError(f"twopc-http: {entry_name(row)} has a null {column} (option keyColumn): every "
                                     f"row needs its key; filter or fill the nulls before writing")
        return idempotency_key(self.sink_id, value=value)

    def _url(self, row: Mapping[str, Any]) -> str:
        out = []
        for text, name in self._parts:
            out.append(text)
            if name:
                if (value := row.get(name)) is None:
                    raise ConfigurationError(f"twopc-http: {entry_name(row)} has a null {name}, which the url "
                                             f"template needs: filter or fill the nulls before writing")
                out.append(urllib.parse.quote(value if isinstance(value, str) else _json(value).strip('"'), safe=""))
        return "".join(out)

    def _body(self, row: Mapping[str, Any]) -> str | None:
        if (column := self.o.body_column) is None:
            return None if self.o.method == "DELETE" else _json(dict(row))
        if (value := row.get(column)) is None or isinstance(value, str):
            return value
        return _json(value)
