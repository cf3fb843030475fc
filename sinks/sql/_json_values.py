"""Spark arrays, maps and structs as JSON text for JSON columns, one encoding for every SQL sink
(the manual's twopc-jdbc page lists it): maps and structs are objects, arrays arrays, NaN and
infinities strings, dates and timestamps ISO 8601 strings, binary values base64."""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa

__all__ = ["is_nested", "json_text", "json_texts", "jsonable"]

_str = json.JSONEncoder(ensure_ascii=False).encode


def is_nested(t: pa.DataType) -> bool:
    """Whether *t* is an array, map or struct type (written to JSON columns as JSON)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
            or getattr(pa.types, "is_list_view", lambda _t: False)(t)
            or getattr(pa.types, "is_large_list_view", lambda _t: False)(t)
            or pa.types.is_map(t) or pa.types.is_struct(t))


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return '"NaN"'
        return ('"Infinity"' if v > 0 else '"-Infinity"') if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return _str(v)
    if isinstance(v, Decimal):
        return format(v, "f") if v.is_finite() else _str(str(v))
    if isinstance(v, dt.datetime):
        return _str((v.astimezone(dt.UTC) if v.tzinfo is not None else v).isoformat())
    if isinstance(v, dt.date | dt.time):
        return _str(v.isoformat())
    if isinstance(v, dt.timedelta):
        micros = (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds
        return _str(f"PT{Decimal(micros).scaleb(-6).normalize():f}S")
    if isinstance(v, bytes | bytearray | memoryview):
        return _str(base64.b64encode(bytes(v)).decode("ascii"))
    return _str(str(v))


def _key(v: Any) -> str:
    """A map key as a JSON string: a string as it is, any other value its JSON text."""
    if isinstance(v, str):
        return _str(v)
    text = _scalar(v)
    return _str(json.loads(text) if text.startswith('"') else text)


Encoder = Callable[[Any], str]


def _encoder(t: pa.DataType) -> Encoder:
    """A function from one ``to_pylist`` value of Arrow type *t* to its JSON text."""
    if pa.types.is_dictionary(t):
        return _encoder(t.value_type)
    if pa.types.is_map(t):
        key, item = _key, _encoder(t.item_type)

        def encode_map(v: Any) -> str:
            if v is None:
                return "null"
            pairs = {key(k): item(x) for k, x in v}
            return "{" + ",".join(f"{k}:{x}" for k, x in pairs.items()) + "}"
        return encode_map
    if pa.types.is_struct(t):
        fields = [(_str(t.field(i).name), t.field(i).name, _encoder(t.field(i).type)) for i in range(t.num_fields)]

        def encode_struct(v: Any) -> str:
            return "null" if v is None else "{" + ",".join(f"{k}:{enc(v.get(name))}" for k, name, enc in fields) + "}"
        return encode_struct
    if is_nested(t):
        element = _encoder(t.value_type)

        def encode_list(v: Any) -> str:
            return "null" if v is None else "[" + ",".join(element(x) for x in v) + "]"
        return encode_list
    return _scalar


def json_texts(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The JSON text of each value of a nested array (``large_string``; null stays null)."""
    encode = _encoder(arr.type)
    return pa.array([None if v is None else encode(v) for v in arr.to_pylist()], pa.large_string())


def json_text(value: Any, t: pa.DataType | None = None) -> str:
    """The JSON text of one Python value, of Arrow type *t* when given, else by its Python type."""
    if t is not None:
        return _encoder(t)(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_key(k)}:{json_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(json_text(v) for v in value) + "]"
    return _scalar(value)


def jsonable(value: Any, t: pa.DataType) -> Any:
    """One value of Arrow type *t* as plain Python that :func:`json.dumps` writes as :func:`json_text` does."""
    return json.loads(json_text(value, t), parse_float=Decimal) if is_nested(t) else value
