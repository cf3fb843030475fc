"""The Redis mapping (reference in :mod:`twopc.sinks.redis`): op dataclasses, their JSON list,
and their compiled templates, refusing what could fail on the server."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import pyarrow as pa

from twopc import ConfigurationError
from twopc.spi import SchemaMismatchError

from ._templates import Number, Template, escape

__all__ = ["COUNTER_LIMIT", "MAX_TTL_S", "Compiled", "HIncrByOp", "HSetOp", "IncrByOp", "RPushOp", "RedisOp", "SetOp",
           "XAddOp", "ZAddOp", "check_schema", "compile_mapping", "mapping_json", "parse_mapping"]

#: Largest |counter value| and |delta per transaction| INCRBY/HINCRBY accept (no overflow).
COUNTER_LIMIT = 10**18
MAX_TTL_S = 10**9

#: Field/value pairs as given: a mapping or pairs (kept as a tuple of pairs).
FieldPairs = Mapping[str, str] | Iterable[tuple[str, str]]

_OPS: dict[str, type[RedisOp]] = {}


@dataclass(frozen=True)
class RedisOp:
    """Base of the mapping's op dataclasses; ``key`` is a key template. A subclass names its command
    and its keys' Redis type: ``class SetOp(RedisOp, op="SET", redis_type="string")``."""

    key: str

    OP: ClassVar[str] = ""
    REDIS_TYPE: ClassVar[str] = ""

    def __init_subclass__(cls, *, op: str = "", redis_type: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if op:
            cls.OP, cls.REDIS_TYPE = op, redis_type
            _OPS[op] = cls

    def to_json(self) -> dict[str, Any]:
        """The op as one element of the ``mapping`` JSON list."""
        out: dict[str, Any] = {"op": self.OP}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None:
                out[f.name] = dict(v) if f.name == "fields" else list(v) if f.name == "columns" else v
        return out


@dataclass(frozen=True)
class SetOp(RedisOp, op="SET", redis_type="string"):
    """``SET key value [EX ttl]`` (last value per key within a transaction)."""

    value: str
    ttl: int | str | None = None


@dataclass(frozen=True)
class _FieldsOp(RedisOp):
    """An op writing field/value pairs (see :class:`XAddOp`)."""

    fields: FieldPairs | None = None
    columns: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.fields is not None:
            items = self.fields.items() if isinstance(self.fields, Mapping) else self.fields
            object.__setattr__(self, "fields", tuple((str(k), str(v)) for k, v in items))
        if self.columns is not None:
            object.__setattr__(self, "columns", tuple(self.columns))

    @property
    def field_pairs(self) -> tuple[tuple[str, str], ...] | None:
        """``fields`` as (field template, value template) pairs."""
        return cast("tuple[tuple[str, str], ...] | None", self.fields)


@dataclass(frozen=True)
class HSetOp(_FieldsOp, op="HSET", redis_type="hash"):
    """``HSET key field value ...`` (last value per field within a transaction; fields as in :class:`XAddOp`)."""


@dataclass(frozen=True)
class XAddOp(_FieldsOp, op="XADD", redis_type="stream"):
    """``XADD key * field value ...`` per row (order kept). ``fields`` maps field templates
    to value templates; or ``columns`` (field = column name); with neither, every column."""


@dataclass(frozen=True)
class IncrByOp(RedisOp, op="INCRBY", redis_type="string"):
    """``INCRBY key by`` (deltas summed within a transaction)."""

    by: int | str = 1


@dataclass(frozen=True)
class HIncrByOp(RedisOp, op="HINCRBY", redis_type="hash"):
    """``HINCRBY key field by`` (deltas summed per field within a transaction)."""

    field: str
    by: int | str = 1


@dataclass(frozen=True)
class RPushOp(RedisOp, op="RPUSH", redis_type="list"):
    """``RPUSH key value`` per row (order kept)."""

    value: str


@dataclass(frozen=True)
class ZAddOp(RedisOp, op="ZADD", redis_type="zset"):
    """``ZADD key score member`` (last score per member within a transaction)."""

    member: str
    score: int | float | str = 0


def parse_mapping(text: str | Sequence[Mapping[str, Any]]) -> list[RedisOp]:
    """Parse the ``mapping`` option (a JSON list of ops); ConfigurationError naming what is wrong."""
    if isinstance(text, str):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigurationError(f"mapping is not valid JSON ({exc}): give a JSON list of ops like "
                                     '[{"op": "INCRBY", "key": "{{app}}:count", "by": 1}]') from None
    else:
        data = list(text)
    if not isinstance(data, list) or not data:
        raise ConfigurationError("mapping must be a non-empty JSON list of ops")
    out: list[RedisOp] = []
    for i, item in enumerate(data):
        if not isinstance(item, Mapping) or "op" not in item:
            raise ConfigurationError(f"mapping[{i}] must be an object with an \"op\" (one of {', '.join(_OPS)})")
        name = str(item["op"]).upper()
        cls = _OPS.get(name)
        if cls is None:
            raise ConfigurationError(f"mapping[{i}]: unknown op {item['op']!r}; use one of {', '.join(_OPS)}")
        params = {k: v for k, v in item.items() if k != "op"}
        fields = dataclasses.fields(cls)
        names = {f.name for f in fields}
        unknown = sorted(set(params) - names)
        if unknown:
            raise ConfigurationError(f"mapping[{i}] ({name}): unknown parameter(s) {unknown}; "
                                     f"{name} takes {sorted(names)}")
        try:
            out.append(cls(**params))
        except TypeError:
            required = [f.name for f in fields if f.default is dataclasses.MISSING]
            raise ConfigurationError(f"mapping[{i}] ({name}) needs {required}") from None
    return out


def mapping_json(ops: Sequence[RedisOp]) -> str:
    """The ``mapping`` option text for *ops*."""
    return json.dumps([op.to_json() for op in ops], separators=(",", ":"))


@dataclass(frozen=True)
class Compiled:
    """One op, compiled: templates and numbers, plus what it reads."""

    index: int
    op: RedisOp
    key: Template
    field_pairs: tuple[tuple[Template, Template], ...] | None  # HSET/XADD; None = all columns
    field: Template | None  # HINCRBY
    value: Template | None  # SET/RPUSH value, ZADD member
    number: Number | None  # by / score / ttl

    @property
    def what(self) -> str:
        """``mapping[i] OP 'key template'``, for messages."""
        return f"mapping[{self.index}] {self.op.OP} {self.op.key!r}"

    @property
    def reads_all_columns(self) -> bool:
        """True for an HSET/XADD without ``fields`` or ``columns``."""
        return self.field_pairs is None and isinstance(self.op, _FieldsOp)

    def pairs(self, all_columns: Iterable[str]) -> tuple[tuple[Template, Template], ...]:
        """An HSET/XADD's (field, value) templates: each of *all_columns* when it names none."""
        return self.field_pairs or column_pairs(all_columns, self.what)

    def columns(self) -> set[str]:
        """The columns the op reads (but for :attr:`reads_all_columns`)."""
        templates = (self.key, *(t for pair in self.field_pairs or () for t in pair), self.field, self.value)
        cols = {col for t in templates if t is not None for col in t.columns}
        if self.number is not None and self.number.column is not None:
            cols.add(self.number.column)
        return cols


def compile_mapping(mapping: Sequence[RedisOp] | str) -> tuple[list[RedisOp], list[Compiled]]:
    """The ops of *mapping* (dataclasses or JSON text) and each compiled; ConfigurationError when
    it is empty, holds a non-:class:`RedisOp` or an invalid op."""
    ops = parse_mapping(mapping) if isinstance(mapping, str) else list(mapping)
    if not ops:
        raise ConfigurationError("mapping must contain at least one op")
    for i, op in enumerate(ops):
        if not isinstance(op, RedisOp):
            raise ConfigurationError(f"mapping[{i}] is not a RedisOp: {op!r}")
    return ops, [_compile(i, op) for i, op in enumerate(ops)]


def _compile(index: int, op: RedisOp) -> Compiled:
    what = f"mapping[{index}] {op.OP}"
    key = Template.compile(op.key, f"{what} key")
    if key.constant == "":
        raise ConfigurationError(f"{what}: key template is empty")
    pairs = field = value = number = None
    if isinstance(op, _FieldsOp):
        pairs = _compile_pairs(op, what)
    elif isinstance(op, SetOp):
        value = Template.compile(op.value, f"{what} value")
        if op.ttl is not None:
            number = Number.parse(op.ttl, f"{what} ttl", integer=True)
            if number.constant is not None and not 1 <= int(number.constant) <= MAX_TTL_S:
                raise ConfigurationError(f"{what} ttl must be 1..{MAX_TTL_S} seconds, got {op.ttl!r}")
    elif isinstance(op, IncrByOp | HIncrByOp):
        if isinstance(op, HIncrByOp):
            field = Template.compile(op.field, f"{what} field")
        number = Number.parse(op.by, f"{what} by", integer=True)
        if number.constant is not None and abs(int(number.constant)) > COUNTER_LIMIT:
            raise ConfigurationError(f"{what} by must be within +-{COUNTER_LIMIT}")
    elif isinstance(op, RPushOp):
        value = Template.compile(op.value, f"{what} value")
    elif isinstance(op, ZAddOp):
        value = Template.compile(op.member, f"{what} member")
        number = Number.parse(op.score, f"{what} score", integer=False)
        if number.constant is not None and math.isnan(float(number.constant)):
            raise ConfigurationError(f"{what} score must not be NaN")
    else:  # pragma: no cover - a new op class without compile support
        raise ConfigurationError(f"{what}: unsupported op")
    return Compiled(index, op, key, pairs, field, value, number)


def _compile_pairs(op: _FieldsOp, what: str) -> tuple[tuple[Template, Template], ...] | None:
    fields = op.field_pairs
    if fields is not None and op.columns is not None:
        raise ConfigurationError(f"{what}: give fields or columns, not both")
    if fields is not None:
        if not fields:
            raise ConfigurationError(f"{what}: fields is empty")
        return tuple((Template.compile(f, f"{what} field"), Template.compile(v, f"{what} value")) for f, v in fields)
    if op.columns is not None:
        if not op.columns:
            raise ConfigurationError(f"{what}: columns is empty")
        return column_pairs(op.columns, what)
    return None


def column_pairs(columns: Iterable[str], what: str) -> tuple[tuple[Template, Template], ...]:
    """(field, value) templates writing each of *columns* under its own name."""
    return tuple((Template.compile(escape(c), f"{what} field"), Template.compile("{" + c + "}", f"{what} column"))
                 for c in columns)


def check_schema(compiled: Sequence[Compiled], schema: pa.Schema) -> None:
    """SchemaMismatchError unless *schema* has every column the mapping reads, of a type its op
    takes (integers for INCRBY/HINCRBY/ttl, a numeric ZADD score)."""
    names = {f.name: f.type for f in schema}
    for c in compiled:
        for col in sorted(c.columns()):
            if col not in names:
                raise SchemaMismatchError(f"{c.what} references column {col!r}, which the DataFrame does "
                                          f"not have (columns: {', '.join(names) or 'none'})")
        num = c.number
        if num is None or num.column is None:
            continue
        t = names[num.column]
        if isinstance(c.op, ZAddOp):
            if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)):
                raise SchemaMismatchError(f"{c.what} score column {num.column!r} is {t}: ZADD needs a "
                                          f"numeric column (cast it, e.g. col.cast('double'))")
        elif not pa.types.is_integer(t):
            raise SchemaMismatchError(f"{c.what} column {num.column!r} is {t}: {c.op.OP} needs an integer "
                                      f"column (cast it, e.g. col.cast('long'))")
