"""Redis two-phase-commit sink: rows become Redis writes, applied exactly once.

How a transaction travels (``T`` is the sink's hash tag, ``P`` = ``T:<sink_id>``)::

    executor  pre_commit: ZADD P:txns <batch> <txn>           register (open)
                          FCALL stage -> RPUSH P:staging:<txn>  the writes, in groups
                          FCALL prepare                         checks, then HSET P:prepared
    driver    commit:     FCALL commit  (one atomic server-side call)
                            marker in P:committed?  -> ALREADY_COMMITTED
                            neither prepared nor marker -> LOST
                            check the TYPE of every target key (and counter values)
                            apply the staged writes in chunks of <= 1000 arguments
                            ZADD P:committed <batch> <txn>; delete the staging
              abort:      FCALL abort: delete staging, prepared entry and registration

Every key of the sink (``P:txns``, ``P:prepared``, ``P:committed``, ``P:staging:*``)
carries the hash tag, so one commit touches one cluster slot; target keys must carry the
same tag on a cluster (see *Cluster* below). ``P:txns`` is a sorted set of the live
transactions scored by batch id: :meth:`RedisSink.list_prepared` reads it, never SCAN.
``P:committed`` is the marker sorted set (scored by batch id), trimmed by
:meth:`RedisSink.purge_committed`. Markers never carry a TTL.

The server-side steps are one Lua library (:mod:`sinks._redis_lua`), loaded with
``FUNCTION LOAD REPLACE`` under the versioned name ``twopc_redis_v1`` (FUNCTIONs survive a
restart); on servers without FUNCTION (< 7.0) they run as EVALSHA scripts, re-sent on
``NOSCRIPT``. A Lua error does not roll back earlier writes, so nothing in the commit can
fail after its first write: value types are validated on the executor before staging, and
the commit checks the type of every target key (and that counters hold integers within
+-10^18; deltas are bounded by +-10^18 per transaction) before applying anything. A
violation is a :class:`RedisTargetError` (a :class:`~twopc.SinkError`) naming the key, its
type and the op, with nothing applied and the staging kept. ``pre_commit`` runs the same
checks, so a bad target usually fails the task, before any decision.

Mapping: what a row becomes
---------------------------
Option ``mapping`` is a JSON list of ops (or pass :class:`RedisOp` dataclasses to
:class:`RedisSink`). Key, field, member and value *templates* use Python format syntax:
``{column}`` inserts a column's value, ``{{`` and ``}}`` are literal braces (so a Redis
hash tag is written ``{{tag}}``). Numeric parameters (``by``, ``score``, ``ttl``) are a
JSON number (a constant) or ``"{column}"`` (exactly one column)::

    [
      {"op": "SET",     "key": "{{shop}}:last:{user}", "value": "{payload}", "ttl": 3600},
      {"op": "HSET",    "key": "{{shop}}:order:{id}", "fields": {"user": "{user}", "total": "{amount}"}},
      {"op": "HSET",    "key": "{{shop}}:row:{id}", "columns": ["payload", "amount"]},
      {"op": "INCRBY",  "key": "{{shop}}:orders", "by": 1},
      {"op": "HINCRBY", "key": "{{shop}}:per_category", "field": "{category}", "by": "{qty}"},
      {"op": "XADD",    "key": "{{shop}}:events", "columns": ["id", "payload"]},
      {"op": "RPUSH",   "key": "{{shop}}:log", "value": "{id}:{payload}"},
      {"op": "ZADD",    "key": "{{shop}}:top", "member": "{user}", "score": "{amount}"}
    ]

``HSET``/``XADD`` take ``fields`` (field template -> value template) or ``columns`` (field
name = column name); with neither, every column. ``ttl`` is in seconds (1 .. 10^9).
Values are written as: str as is (UTF-8), bytes raw, int in decimal, float as Python's
shortest repr, bool ``true``/``false``, date/time ISO 8601, lists/dicts as JSON. A null in
a referenced column is an error. Python API::

    RedisSink("redis://cache:6379/0", [IncrByOp("{{shop}}:orders", by=1),
                                        HSetOp("{{shop}}:row:{id}", columns=("payload",))],
              hash_tag="shop")

A transaction's effects are held (folded) in the executor's memory until ``pre_commit``
stages them, so a task needs memory in proportion to the distinct keys/fields it writes
plus its XADD/RPUSH values; use more partitions for very large batches.
Within one transaction (one Spark task attempt), effects are folded before staging: SETs,
HSET fields and ZADD members keep the last value per key/field/member, INCRBY/HINCRBY
deltas are summed, XADD entries and RPUSH values keep row order. Each target key may be
written by only one op of the mapping within a transaction (two ops on one key is a
:class:`~twopc.ConfigurationError`): effects of different ops could otherwise depend on
their order. Across transactions every op keeps Redis semantics (XADD uses ``*`` ids).

Options (keys case-insensitive)
-------------------------------
=====================  ============================================================
``url``                ``redis://[user[:password]@]host:port/db`` or ``rediss://``
``password``           overrides the URL's password (never logged nor stored)
``mapping``            the JSON mapping above (required)
``hashTag``            the tag of the sink's keys, ``{shop}`` or ``shop``; default
                       ``{twopc:<sink id>}``
``requireSameSlot``    ``auto`` (default: when ``INFO cluster`` says cluster_enabled:1),
                       ``true`` or ``false``: refuse target keys outside the tag's slot
``durability``         ``always`` (default: needs ``appendonly yes`` and ``appendfsync
                       always``) or ``everysec`` (accepts ``appendfsync everysec``; an
                       OS crash can lose ~1 s of writes: prepared staging or commits)
``skipConfigCheck``    ``true`` when CONFIG is disabled (managed Redis): you vouch for
                       AOF + fsync always and ``maxmemory-policy noeviction``
``scriptMode``         ``auto`` (FUNCTION on Redis >= 7, else EVALSHA), ``function``,
                       ``eval``
``socketTimeout``      seconds, default 60; ``connectTimeout`` seconds, default 10
=====================  ============================================================

Server requirements (checked by :meth:`RedisSink.validate`): AOF with fsync always (or
``durability=everysec``), and a ``maxmemory-policy`` that never evicts the markers:
``allkeys-*`` policies are refused (``noeviction`` recommended; ``volatile-*`` is accepted
because markers and staging never have a TTL). On Redis 7.2+ ``WAITAOF 1 0 <ms>`` after
each step would be an alternative way to know a write reached the local AOF with
``appendfsync everysec``; this sink does not require it.

Cluster: all keys of one commit must hash to one slot. Put the sink's hash tag in every
key template (``"{{shop}}:orders"`` with ``hashTag=shop``); with ``requireSameSlot`` on,
a key outside the slot is a :class:`~twopc.ConfigurationError` before anything is staged.
Slots are computed with CRC16 (``redis.crc.key_slot``). The commit script reaches target
keys that it does not declare (they are in the declared keys' slot). Cluster connections
use ``redis.cluster.RedisCluster``; this path is not tested here (no cluster available).

How long one commit blocks the server: the commit is one script, linear in the staged
elements (Redis serves nobody else meanwhile). Measured on a 2-core machine with
``python -m recovery.bench_redis`` (server-side FCALL time): ~15 ms per 10k HSET fields in
one hash, ~125 ms per 10k rows of HSET (2 fields) + XADD + two counters, 0.05 ms for an
already-committed replay. A transaction is one Spark partition of one batch: bound the
block by the rows per partition (``maxFilesPerTrigger``/``maxOffsetsPerTrigger``,
``repartition``); ``pre_commit``'s checks block for a fraction of that.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
import logging
import math
import os
import re
import secrets
import string
import threading
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa
import redis
import redis.exceptions as rex
from redis.crc import key_slot as _crc_key_slot

from twopc import (
    CommitOutcome,
    ConfigurationError,
    MissingOptionError,
    ProtocolError,
    SchemaMismatchError,
    SinkError,
    SinkUnavailableError,
    TargetConfigurationError,
    TransactionContext,
    TransactionHandle,
    TwoPhaseCommitDataSource,
    TwoPhaseCommitSink,
    option,
    redact,
)

from . import _redis_lua as lua

__all__ = [
    "HIncrByOp",
    "HSetOp",
    "IncrByOp",
    "RPushOp",
    "RedisDataSource",
    "RedisHandle",
    "RedisKeys",
    "RedisOp",
    "RedisSink",
    "RedisTargetError",
    "SetOp",
    "XAddOp",
    "ZAddOp",
    "dispose_clients",
    "key_slot",
    "parse_mapping",
]

log = logging.getLogger("twopc.sinks.redis")

#: Largest |counter value| and |delta per transaction| INCRBY/HINCRBY accept (no overflow).
COUNTER_LIMIT = 10**18
MAX_TTL_S = 10**9
_SINK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def key_slot(key: str | bytes) -> int:
    """The Redis Cluster slot (0..16383) of *key*: CRC16 of its hash tag, or of the whole key."""
    return int(_crc_key_slot(key.encode("utf-8") if isinstance(key, str) else key))


class RedisTargetError(SinkError):
    """A target key cannot take the op (wrong Redis type, or a counter that is not an
    integer within +-10^18). Nothing of the transaction was applied; its staging is kept.

    Attributes: ``key``, ``redis_type`` (as TYPE reports it), ``op``, ``field`` (HINCRBY).
    """

    def __init__(self, message: str, *, key: str, redis_type: str, op: str, field: str = "") -> None:
        super().__init__(message)
        self.key = key
        self.redis_type = redis_type
        self.op = op
        self.field = field


# -- handle ----------------------------------------------------------------------------

@dataclass(frozen=True)
class RedisHandle(TransactionHandle, kind="twopc.redis", version=1):
    """A prepared Redis transaction: ``txn_id`` names its staging list.

    Attributes:
        hash_tag: the hash tag its keys were written under (``{...}``); empty means "the
            sink's configured tag".
        staged: staging elements, ``-1`` when unknown (handles rebuilt by list_prepared).
    """

    hash_tag: str = ""
    staged: int = -1


@dataclass(frozen=True)
class RedisKeys:
    """The keys of one sink id under one hash tag (all in the tag's slot)."""

    txns: str
    prepared: str
    committed: str
    staging_prefix: str

    def staging(self, txn_id: str) -> str:
        """The staging list of *txn_id*."""
        return self.staging_prefix + txn_id


# -- mapping -----------------------------------------------------------------------------

_FORMATTER = string.Formatter()


@dataclass(frozen=True)
class _Template:
    """A compiled template: literal pieces and column names alternating."""

    text: str
    parts: tuple[tuple[str, str | None], ...]

    @classmethod
    def compile(cls, text: str, what: str) -> _Template:
        if not isinstance(text, str):
            raise ConfigurationError(f"{what} must be a string template, got {text!r}")
        parts: list[tuple[str, str | None]] = []
        acc = ""
        try:
            parsed = list(_FORMATTER.parse(text))
        except ValueError as exc:
            raise ConfigurationError(
                f"{what} {text!r} is not a valid template ({exc}): columns are {{column}}, "
                f"literal braces {{{{ and }}}} (a Redis hash tag is written {{{{tag}}}})") from None
        for literal, name, spec, conv in parsed:
            if name is not None and (not name or spec or conv or any(ch in name for ch in ".[]")):
                raise ConfigurationError(
                    f"{what} {text!r}: {{{name}}} is not a plain column reference (write "
                    f"{{column}}; a literal brace is {{{{ or }}}})")
            acc += literal
            if name is not None:
                parts.append((acc, name))
                acc = ""
        if acc or not parts:
            parts.append((acc, None))
        return cls(text, tuple(parts))

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(n for _, n in self.parts if n is not None)

    @property
    def exact(self) -> str | None:
        """The column when the template is exactly ``{column}``."""
        if len(self.parts) == 1 and self.parts[0][0] == "" and self.parts[0][1] is not None:
            return self.parts[0][1]
        return None

    @property
    def constant(self) -> str | None:
        """The text when the template references no column."""
        if self.columns:
            return None
        return "".join(lit for lit, _ in self.parts)

    def fixed_slot(self) -> int | None:
        """The slot every rendering of this key template hashes to, when the hash tag is
        complete in the literal text before the first column; else None."""
        const = self.constant
        if const is not None:
            return key_slot(const)
        prefix = self.parts[0][0]
        start = prefix.find("{")
        if start < 0:
            return None
        end = prefix.find("}", start + 1)
        if end < 0 or end == start + 1:
            return None
        return key_slot(prefix[start: end + 1])

    def render(self, cols: Mapping[str, list[Any]], n: int, what: str) -> list[Any]:
        """Render for rows 0..n-1. An exact template keeps bytes values as bytes."""
        const = self.constant
        if const is not None:
            return [const] * n
        exact = self.exact
        if exact is not None:
            return [_enc(v, exact, what) for v in cols[exact]]
        pieces: list[list[str] | str] = []
        for literal, name in self.parts:
            if literal:
                pieces.append(literal)
            if name is not None:
                pieces.append([_enc_text(v, name, what) for v in cols[name]])
        out = []
        for i in range(n):
            out.append("".join(p if isinstance(p, str) else p[i] for p in pieces))
        return out


def _null(column: str, what: str) -> ConfigurationError:
    return ConfigurationError(f"column {column!r} is null in a row, but {what} needs a value: "
                              f"filter or fill nulls before writing (e.g. df.na.fill)")


def _enc(v: Any, column: str, what: str) -> str | bytes:
    """Encode a cell as a Redis string (see the module docstring)."""
    if isinstance(v, str | bytes):
        return v
    if v is None:
        raise _null(column, what)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, datetime.date | datetime.time):
        return v.isoformat()
    if isinstance(v, list | dict | tuple):
        return json.dumps(v, default=str, separators=(",", ":"))
    if isinstance(v, decimal.Decimal):
        return str(v)
    return str(v)


def _enc_text(v: Any, column: str, what: str) -> str:
    e = _enc(v, column, what)
    if isinstance(e, bytes):
        try:
            return e.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigurationError(f"column {column!r} holds bytes that are not UTF-8 and cannot be "
                                     f"part of {what}") from None
    return e


@dataclass(frozen=True)
class _Number:
    """A numeric op parameter: a constant or one column."""

    constant: int | float | None
    column: str | None

    @classmethod
    def parse(cls, value: Any, what: str, *, integer: bool) -> _Number:
        if isinstance(value, bool):
            raise ConfigurationError(f"{what} must be a number or \"{{column}}\", got {value!r}")
        if isinstance(value, int) or (isinstance(value, float) and not integer):
            return cls(value, None)
        if isinstance(value, str):
            t = _Template.compile(value, what)
            if t.exact is not None:
                return cls(None, t.exact)
        kind = "an integer" if integer else "a number"
        raise ConfigurationError(f"{what} must be {kind} or \"{{column}}\" (exactly one column), got {value!r}")

    def values(self, cols: Mapping[str, list[Any]], n: int) -> list[Any]:
        return [self.constant] * n if self.column is None else cols[self.column]


class RedisOp:
    """Base of the mapping's op dataclasses. ``key`` is a key template."""

    OP: ClassVar[str] = ""
    REDIS_TYPE: ClassVar[str] = ""
    key: str

    def to_json(self) -> dict[str, Any]:
        """The op as one element of the ``mapping`` JSON list."""
        out: dict[str, Any] = {"op": self.OP}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if v is None:
                continue
            if f.name == "fields":
                v = dict(v)
            elif f.name == "columns":
                v = list(v)
            out[f.name] = v
        return out


def _pairs(fields: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> tuple[tuple[str, str], ...] | None:
    if fields is None:
        return None
    items = fields.items() if isinstance(fields, Mapping) else fields
    return tuple((str(k), str(v)) for k, v in items)


@dataclass(frozen=True)
class SetOp(RedisOp):
    """``SET key value [EX ttl]`` (last value per key within a transaction)."""

    OP: ClassVar[str] = "SET"
    REDIS_TYPE: ClassVar[str] = "string"
    key: str
    value: str
    ttl: int | str | None = None


@dataclass(frozen=True)
class _FieldsOp(RedisOp):
    """An op writing field/value pairs: ``fields`` maps field templates to value templates;
    or ``columns`` (field = column name); with neither, every column."""

    key: str
    fields: Any = None
    columns: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", _pairs(self.fields))
        if self.columns is not None:
            object.__setattr__(self, "columns", tuple(self.columns))


@dataclass(frozen=True)
class HSetOp(_FieldsOp):
    """``HSET key field value ...`` (fields as in :class:`_FieldsOp`)."""

    OP: ClassVar[str] = "HSET"
    REDIS_TYPE: ClassVar[str] = "hash"


@dataclass(frozen=True)
class IncrByOp(RedisOp):
    """``INCRBY key by`` (deltas summed within a transaction)."""

    OP: ClassVar[str] = "INCRBY"
    REDIS_TYPE: ClassVar[str] = "string"
    key: str
    by: int | str = 1


@dataclass(frozen=True)
class HIncrByOp(RedisOp):
    """``HINCRBY key field by`` (deltas summed per field within a transaction)."""

    OP: ClassVar[str] = "HINCRBY"
    REDIS_TYPE: ClassVar[str] = "hash"
    key: str
    field: str
    by: int | str = 1


@dataclass(frozen=True)
class XAddOp(_FieldsOp):
    """``XADD key * field value ...`` per row (order kept; fields as in :class:`HSetOp`)."""

    OP: ClassVar[str] = "XADD"
    REDIS_TYPE: ClassVar[str] = "stream"


@dataclass(frozen=True)
class RPushOp(RedisOp):
    """``RPUSH key value`` per row (order kept)."""

    OP: ClassVar[str] = "RPUSH"
    REDIS_TYPE: ClassVar[str] = "list"
    key: str
    value: str


@dataclass(frozen=True)
class ZAddOp(RedisOp):
    """``ZADD key score member`` (last score per member within a transaction)."""

    OP: ClassVar[str] = "ZADD"
    REDIS_TYPE: ClassVar[str] = "zset"
    key: str
    member: str
    score: int | float | str = 0


_OPS: dict[str, type[RedisOp]] = {c.OP: c for c in (SetOp, HSetOp, IncrByOp, HIncrByOp, XAddOp, RPushOp, ZAddOp)}


def parse_mapping(text: str | Sequence[Mapping[str, Any]]) -> list[RedisOp]:
    """Parse the ``mapping`` option (a JSON list of ops, see the module docstring).

    Raises:
        ConfigurationError: not JSON, not a list of objects, an unknown op, a missing or
            unknown parameter, or an invalid template.
    """
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
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(params) - names)
        if unknown:
            raise ConfigurationError(f"mapping[{i}] ({name}): unknown parameter(s) {unknown}; "
                                     f"{name} takes {sorted(names)}")
        try:
            op = cls(**params)
        except TypeError:
            required = [f.name for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                        if f.default is dataclasses.MISSING]
            raise ConfigurationError(f"mapping[{i}] ({name}) needs {required}") from None
        out.append(op)
    return out


def mapping_json(ops: Sequence[RedisOp]) -> str:
    """The ``mapping`` option text for *ops*."""
    return json.dumps([op.to_json() for op in ops], separators=(",", ":"))


@dataclass(frozen=True)
class _Compiled:
    """One op, compiled: templates and numbers, plus what it reads."""

    index: int
    op: RedisOp
    key: _Template
    field_pairs: tuple[tuple[_Template, _Template], ...] | None  # HSET/XADD; None = all columns
    field: _Template | None  # HINCRBY
    value: _Template | None  # SET/RPUSH value, ZADD member
    number: _Number | None  # by / score / ttl

    @property
    def what(self) -> str:
        return f"mapping[{self.index}] {self.op.OP} {self.op.key!r}"

    def columns(self) -> set[str]:
        cols = set(self.key.columns)
        for f, v in self.field_pairs or ():
            cols.update(f.columns)
            cols.update(v.columns)
        for t in (self.field, self.value):
            if t is not None:
                cols.update(t.columns)
        if self.number is not None and self.number.column is not None:
            cols.add(self.number.column)
        return cols


def _compile(index: int, op: RedisOp) -> _Compiled:
    what = f"mapping[{index}] {op.OP}"
    key = _Template.compile(op.key, f"{what} key")
    if key.constant == "":
        raise ConfigurationError(f"{what}: key template is empty")
    pairs = field_t = value = None
    number = None
    if isinstance(op, HSetOp | XAddOp):
        if op.fields is not None and op.columns is not None:
            raise ConfigurationError(f"{what}: give fields or columns, not both")
        if op.fields is not None:
            if not op.fields:
                raise ConfigurationError(f"{what}: fields is empty")
            pairs = tuple((_Template.compile(f, f"{what} field"), _Template.compile(v, f"{what} value"))
                          for f, v in op.fields)
        elif op.columns is not None:
            if not op.columns:
                raise ConfigurationError(f"{what}: columns is empty")
            pairs = tuple((_Template.compile(_escape(c), f"{what} field"),
                           _Template.compile("{" + c + "}", f"{what} column")) for c in op.columns)
    elif isinstance(op, SetOp):
        value = _Template.compile(op.value, f"{what} value")
        if op.ttl is not None:
            number = _Number.parse(op.ttl, f"{what} ttl", integer=True)
            if number.constant is not None and not 1 <= int(number.constant) <= MAX_TTL_S:
                raise ConfigurationError(f"{what} ttl must be 1..{MAX_TTL_S} seconds, got {op.ttl!r}")
    elif isinstance(op, IncrByOp):
        number = _Number.parse(op.by, f"{what} by", integer=True)
    elif isinstance(op, HIncrByOp):
        field_t = _Template.compile(op.field, f"{what} field")
        number = _Number.parse(op.by, f"{what} by", integer=True)
    elif isinstance(op, RPushOp):
        value = _Template.compile(op.value, f"{what} value")
    elif isinstance(op, ZAddOp):
        value = _Template.compile(op.member, f"{what} member")
        number = _Number.parse(op.score, f"{what} score", integer=False)
        if number.constant is not None and math.isnan(float(number.constant)):
            raise ConfigurationError(f"{what} score must not be NaN")
    else:  # pragma: no cover - a new op class without compile support
        raise ConfigurationError(f"{what}: unsupported op")
    if isinstance(number, _Number) and number.constant is not None and isinstance(op, IncrByOp | HIncrByOp):
        if abs(int(number.constant)) > COUNTER_LIMIT:
            raise ConfigurationError(f"{what} by must be within +-{COUNTER_LIMIT}")
    return _Compiled(index, op, key, pairs, field_t, value, number)


def _escape(literal: str) -> str:
    return literal.replace("{", "{{").replace("}", "}}")


def _is_int_type(t: pa.DataType) -> bool:
    return pa.types.is_integer(t)


def _is_num_type(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


# -- open transaction ---------------------------------------------------------------------

@dataclass(eq=False)
class _RedisTxn:
    """The open transaction of one task attempt (process-local): folded effects."""

    context: TransactionContext
    txn_id: str
    tag: str
    state: list[dict[str, Any]]
    owner: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    registered: bool = False
    prepared: bool = False


# -- clients (one per process, URL and password) --------------------------------------------

_CLIENTS: dict[tuple[Any, ...], Any] = {}
_LOADED: set[tuple[Any, ...]] = set()
_CLIENTS_PID = os.getpid()
_CLIENTS_LOCK = threading.Lock()


def dispose_clients() -> None:
    """Close every pooled Redis connection of this process."""
    with _CLIENTS_LOCK:
        clients = list(_CLIENTS.values())
        _CLIENTS.clear()
        _LOADED.clear()
    for c in clients:
        try:
            c.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass


def _bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = option(options, name)
    if raw is None:
        return default
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ConfigurationError(f"option {name} must be true or false, got {raw!r}")


class RedisSink(TwoPhaseCommitSink[dict[str, Any], _RedisTxn, RedisHandle]):
    """Exactly-once Redis writes (see the module docstring for the protocol and options).

    Args:
        url: ``redis://`` or ``rediss://`` URL; a password in it is moved out of the URL.
        mapping: the ops (dataclasses) or the JSON mapping text.
        password: overrides the URL's password.
        hash_tag: tag of the sink's keys (``{x}`` or ``x``); default ``{twopc:<sink id>}``.
        require_same_slot: ``"auto"`` (cluster only), ``True`` or ``False``.
        durability: ``"always"`` or ``"everysec"``.
        skip_config_check: trust the server's persistence/eviction settings without CONFIG.
        script_mode: ``"auto"``, ``"function"`` or ``"eval"``.
        socket_timeout, connect_timeout: seconds.

    Raises:
        ConfigurationError: an argument is invalid.

    The instance holds configuration only and pickles to executors; connections come from
    a per-process pool, opened lazily.
    """

    handle_type = RedisHandle

    def __init__(self, url: str, mapping: Sequence[RedisOp] | str, *, password: str | None = None,
                 hash_tag: str | None = None, require_same_slot: bool | str = "auto",
                 durability: str = "always", skip_config_check: bool = False,
                 script_mode: str = "auto", socket_timeout: float = 60.0,
                 connect_timeout: float = 10.0) -> None:
        if not url:
            raise MissingOptionError('RedisSink needs option url, e.g. "redis://host:6379/0"')
        self._url, url_password = _split_url(url)
        self._password = password if password is not None else url_password
        ops = parse_mapping(mapping) if isinstance(mapping, str) else list(mapping)
        if not ops:
            raise ConfigurationError("mapping must contain at least one op")
        for i, op in enumerate(ops):
            if not isinstance(op, RedisOp):
                raise ConfigurationError(f"mapping[{i}] is not a RedisOp: {op!r}")
        self._ops = ops
        self._compiled = [_compile(i, op) for i, op in enumerate(ops)]
        self._hash_tag = _normalize_tag(hash_tag) if hash_tag else None
        if isinstance(require_same_slot, str):
            v = require_same_slot.strip().lower()
            if v == "auto":
                self._same_slot: bool | None = None
            elif v in _TRUE or v in _FALSE:
                self._same_slot = v in _TRUE
            else:
                raise ConfigurationError(f"requireSameSlot must be auto, true or false, got {require_same_slot!r}")
        else:
            self._same_slot = bool(require_same_slot)
        durability = durability.strip().lower()
        if durability not in ("always", "everysec"):
            raise ConfigurationError(f"durability must be always or everysec, got {durability!r}")
        self._durability = durability
        self._skip_config_check = bool(skip_config_check)
        script_mode = script_mode.strip().lower()
        if script_mode not in ("auto", "function", "eval"):
            raise ConfigurationError(f"scriptMode must be auto, function or eval, got {script_mode!r}")
        self._script_mode = script_mode
        try:
            self._socket_timeout = float(socket_timeout)
            self._connect_timeout = float(connect_timeout)
        except (TypeError, ValueError):
            raise ConfigurationError("socketTimeout and connectTimeout must be numbers of seconds") from None
        if self._socket_timeout <= 0 or self._connect_timeout <= 0:
            raise ConfigurationError("socketTimeout and connectTimeout must be > 0 seconds")
        self._mode: str | None = None if script_mode == "auto" else script_mode
        self._cluster: bool | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> RedisSink:
        """Build the sink from Spark options (see the module docstring for the keys).

        Raises:
            MissingOptionError: ``url`` or ``mapping`` is missing.
            ConfigurationError: an option is invalid.
        """
        url = option(options, "url")
        if not url:
            raise MissingOptionError('twopc-redis needs option "url", e.g. .option("url", "redis://host:6379/0")')
        mapping = option(options, "mapping")
        if not mapping:
            raise MissingOptionError(
                'twopc-redis needs option "mapping": a JSON list of ops, e.g. '
                '.option("mapping", \'[{"op": "INCRBY", "key": "{{app}}:rows", "by": 1}]\')')
        return cls(
            url, mapping,
            password=option(options, "password"),
            hash_tag=option(options, "hashTag"),
            require_same_slot=option(options, "requireSameSlot", "auto") or "auto",
            durability=option(options, "durability", "always") or "always",
            skip_config_check=_bool_option(options, "skipConfigCheck", False),
            script_mode=option(options, "scriptMode", "auto") or "auto",
            socket_timeout=option(options, "socketTimeout", "60") or 60,  # type: ignore[arg-type]
            connect_timeout=option(options, "connectTimeout", "10") or 10,  # type: ignore[arg-type]
        )

    # -- description -------------------------------------------------------------------
    @property
    def ops(self) -> list[RedisOp]:
        """The mapping."""
        return list(self._ops)

    def describe(self) -> str:
        """``Redis <url without password>``."""
        return f"Redis {self._url}"

    def __repr__(self) -> str:
        return f"RedisSink({self.describe()})"

    def _where(self) -> str:
        u = urllib.parse.urlsplit(self._url)
        return f"{u.hostname or 'localhost'}:{u.port or 6379}{u.path or ''}"

    def _redact(self, text: str) -> str:
        pw = self._password
        if not pw:
            return text
        return redact(text, [pw, urllib.parse.quote(pw, safe=""), urllib.parse.quote_plus(pw)])

    # -- keys --------------------------------------------------------------------------
    def hash_tag(self, sink_id: str) -> str:
        """The hash tag of *sink_id*'s keys (``{...}``)."""
        return self._hash_tag or f"{{twopc:{sink_id}}}"

    def keys_for(self, sink_id: str, tag: str | None = None) -> RedisKeys:
        """The sink's own keys for *sink_id* (under *tag*, default :meth:`hash_tag`)."""
        p = f"{tag or self.hash_tag(sink_id)}:{sink_id}:"
        return RedisKeys(p + "txns", p + "prepared", p + "committed", p + "staging:")

    def check_same_slot(self, key: str, sink_id: str, op: str = "") -> None:
        """Refuse *key* when it does not hash to the slot of *sink_id*'s hash tag.

        Raises:
            ConfigurationError: the key is in another slot (the message says to put the
                hash tag into the key template).
        """
        tag = self.hash_tag(sink_id)
        want = key_slot(tag)
        got = key_slot(key)
        if got != want:
            raise ConfigurationError(self._slot_message(f"target key {key!r}", got, tag, want, op))

    def _slot_message(self, subject: str, got: int, tag: str, want: int, op: str) -> str:
        lit = tag.replace("{", "{{").replace("}", "}}")
        return (f"{op + ': ' if op else ''}{subject} hashes to cluster slot {got}, but the sink's "
                f"keys use hash tag {tag} (slot {want}): one commit must touch one slot. Put the hash tag "
                f"into the key template, e.g. \"{lit}:...\" (a literal brace is written {{{{ in a template)"
                + ("" if self._hash_tag else ", and set option hashTag so it does not depend on the sink id"))

    # -- connections ---------------------------------------------------------------------
    def _client(self) -> Any:
        global _CLIENTS_PID
        key = (self._url, self._password, self._socket_timeout, self._connect_timeout)
        with _CLIENTS_LOCK:
            if _CLIENTS_PID != os.getpid():
                _CLIENTS.clear()
                _LOADED.clear()
                _CLIENTS_PID = os.getpid()
            client = _CLIENTS.get(key)
            if client is None:
                kwargs: dict[str, Any] = {"socket_timeout": self._socket_timeout,
                                          "socket_connect_timeout": self._connect_timeout,
                                          "client_name": "twopc"}
                if self._password is not None:
                    kwargs["password"] = self._password
                try:
                    client = redis.Redis.from_url(self._url, **kwargs)
                except (ValueError, rex.RedisError) as exc:
                    raise ConfigurationError(f"url is not a usable Redis URL ({self._redact(str(exc))}): "
                                             f"use redis://host:port/db or rediss://host:port/db") from None
                if self._cluster is None:
                    self._cluster = self._detect_cluster(client)
                if self._cluster:  # pragma: no cover - no cluster server in the test environment
                    from redis.cluster import RedisCluster

                    client.close()
                    client = RedisCluster.from_url(self._url, **kwargs)
                _CLIENTS[key] = client
            return client

    def _detect_cluster(self, client: Any) -> bool:
        try:
            info = client.info("cluster")
        except rex.RedisError as exc:
            raise self._map_error(exc, "read INFO cluster") from None
        return bool(int(info.get("cluster_enabled", 0) or 0))

    def _slot_check_on(self) -> bool:
        if self._same_slot is not None:
            return self._same_slot
        self._client()
        return bool(self._cluster)

    def _map_error(self, exc: BaseException, action: str) -> SinkError:
        text = self._redact(" ".join(str(exc).split()))
        if isinstance(exc, rex.AuthenticationError | rex.AuthorizationError):
            return SinkUnavailableError(f"Redis at {self._where()} refused the login while trying to {action}: "
                                        f"{text}; check the password option")
        if isinstance(exc, rex.ConnectionError | rex.TimeoutError | rex.BusyLoadingError):
            return SinkUnavailableError(f"cannot reach Redis at {self._where()} while trying to {action}: {text}")
        return SinkError(f"Redis at {self._where()} failed to {action}: {text}")

    def _ensure_mode(self, client: Any) -> str:
        if self._mode is None:
            try:
                version = str(client.info("server").get("redis_version", "0"))
            except rex.RedisError as exc:
                raise self._map_error(exc, "read INFO server") from None
            major = int(version.split(".")[0] or 0) if version.split(".")[0].isdigit() else 0
            self._mode = "function" if major >= 7 else "eval"
        return self._mode

    def _load(self, client: Any, *, force: bool = False) -> None:
        """``FUNCTION LOAD REPLACE`` the library (once per process and server), or
        ``SCRIPT LOAD`` the scripts in eval mode."""
        mode = self._ensure_mode(client)
        key = (self._url, mode)
        if key in _LOADED and not force:
            return
        try:
            if mode == "function":
                nodes = [client]
                if self._cluster:  # pragma: no cover - untested without a cluster
                    nodes = [client.get_redis_connection(n) for n in client.get_primaries()]
                for node in nodes:
                    node.function_load(lua.library_code(), replace=True)
            else:
                for name in lua.FUNCTIONS:
                    client.script_load(lua.script_code(name))
        except rex.RedisError as exc:
            raise self._map_error(exc, f"load the {lua.LIBRARY_NAME} server-side library") from None
        _LOADED.add(key)

    def _call(self, target: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Queue or run server-side step *name* on *target* (a client or a pipeline)."""
        if self._mode == "function":
            return target.fcall(lua.function_name(name), len(keys), *keys, *args)
        return target.evalsha(lua.script_sha(name), len(keys), *keys, *args)

    def _run(self, name: str, keys: Sequence[str], args: Sequence[Any], action: str) -> list[str]:
        """Run one server-side step, loading the library when the server lost it.

        Raises:
            SinkUnavailableError / SinkError: the server failed.
        """
        client = self._client()
        self._load(client)
        for attempt in (0, 1):
            try:
                return _decode(self._call(client, name, keys, args))
            except rex.NoScriptError:
                pass
            except rex.ResponseError as exc:
                if "function not found" not in str(exc).lower() or attempt:
                    raise self._map_error(exc, action) from None
            except rex.RedisError as exc:
                raise self._map_error(exc, action) from None
            self._load(client, force=True)
        raise SinkError(f"Redis at {self._where()}: the server-side library vanished twice while trying to {action}")

    def close(self) -> None:
        """Nothing to release per sink: connections are pooled per process
        (:func:`dispose_clients` closes them)."""

    # -- validation ---------------------------------------------------------------------
    def validate(self, schema: pa.Schema) -> None:
        """Check the mapping against *schema* and the server's configuration, and load the
        server-side library.

        Raises:
            SchemaMismatchError: a referenced column is missing, or has a type the op cannot
                take (INCRBY/HINCRBY/ttl need integer columns, ZADD a numeric score).
            TargetConfigurationError: persistence is weaker than ``durability`` allows, the
                eviction policy may evict markers, or CONFIG is unavailable without
                ``skipConfigCheck=true``.
            ConfigurationError: a key template with a fixed slot is outside the sink's slot
                (when the slot check is on and ``hashTag`` is set; cluster without hashTag).
            SinkUnavailableError: the server cannot be reached or refused the login.
        """
        names = {f.name: f.type for f in schema}
        for c in self._compiled:
            for col in sorted(c.columns()):
                if col not in names:
                    raise SchemaMismatchError(f"{c.what} references column {col!r}, which the DataFrame does "
                                              f"not have (columns: {', '.join(names) or 'none'})")
            num = c.number
            if num is not None and num.column is not None:
                t = names[num.column]
                if isinstance(c.op, ZAddOp):
                    if not _is_num_type(t):
                        raise SchemaMismatchError(f"{c.what} score column {num.column!r} is {t}: ZADD needs a "
                                                  f"numeric column (cast it, e.g. col.cast('double'))")
                elif not _is_int_type(t):
                    raise SchemaMismatchError(f"{c.what} column {num.column!r} is {t}: {c.op.OP} needs an integer "
                                              f"column (cast it, e.g. col.cast('long'))")
        client = self._client()
        try:
            client.ping()
        except rex.RedisError as exc:
            raise self._map_error(exc, "connect") from None
        self._check_config(client)
        if self._slot_check_on():
            if self._hash_tag is None and self._cluster:
                raise ConfigurationError(
                    f"Redis at {self._where()} is a cluster: set option hashTag (e.g. \"shop\") and put it into "
                    f"every key template (\"{{{{shop}}}}:orders\") so each commit touches one slot")
            if self._hash_tag is not None:
                want = key_slot(self._hash_tag)
                for c in self._compiled:
                    got = c.key.fixed_slot()
                    if got is not None and got != want:
                        raise ConfigurationError(self._slot_message(f"key template {c.op.key!r}", got, self._hash_tag,
                                                                    want, c.what))
        self._load(client)

    def _check_config(self, client: Any) -> None:
        if self._skip_config_check:
            log.warning("twopc redis: skipConfigCheck=true: not checking persistence and eviction of %s",
                        self._where())
            return
        values: dict[str, str] = {}
        for name in ("appendonly", "appendfsync", "maxmemory-policy"):
            try:
                got = client.config_get(name)
            except rex.ResponseError as exc:
                raise TargetConfigurationError(
                    f"Redis at {self._where()} does not allow CONFIG GET ({self._redact(str(exc))}), as managed "
                    f"services often do: twopc cannot check that it persists every write (appendonly yes, "
                    f"appendfsync always) and never evicts keys (maxmemory-policy noeviction). Check both "
                    f"with your provider, then set option skipConfigCheck=true to proceed") from None
            except rex.RedisError as exc:
                raise self._map_error(exc, "read its configuration") from None
            raw = got.get(name) if name in got else got.get(name.encode(), b"")
            values[name] = (raw.decode() if isinstance(raw, bytes) else str(raw or "")).lower()
        policy = values["maxmemory-policy"]
        if policy.startswith("allkeys-"):
            raise TargetConfigurationError(
                f"Redis at {self._where()} has maxmemory-policy {policy}: it may evict twopc's commit markers and "
                f"prepared staging, which would turn committed batches into 'lost' ones and lose prepared "
                f"writes. Set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in "
                f"redis.conf)")
        aof, fsync = values["appendonly"], values["appendfsync"]
        fix = ("CONFIG SET appendonly yes; CONFIG SET appendfsync always; CONFIG REWRITE (or set them in "
               "redis.conf)")
        if aof != "yes":
            raise TargetConfigurationError(
                f"Redis at {self._where()} has appendonly {aof}: prepared transactions and commit markers would "
                f"not survive a restart. Enable the append-only file with fsync on every write: {fix}")
        if fsync == "always":
            return
        if self._durability == "everysec" and fsync == "everysec":
            log.warning("twopc redis: %s uses appendfsync everysec (accepted by durability=everysec): an OS "
                        "crash or power loss can lose about 1 s of acknowledged writes, including prepared "
                        "staging and commits", self._where())
            return
        raise TargetConfigurationError(
            f"Redis at {self._where()} has appendfsync {fsync}: an OS crash could lose acknowledged prepared "
            f"transactions or commits. Set appendfsync always ({fix}), or accept about 1 s of loss with "
            f"appendfsync everysec and option durability=everysec")

    # -- executor side ---------------------------------------------------------------------
    @staticmethod
    def _txn_id(ctx: TransactionContext) -> str:
        # '~' cannot occur in a sink id, so the id parses back unambiguously
        return f"{ctx.sink_id}~{ctx.batch_id}~{ctx.partition_id}~{ctx.attempt_id}~{secrets.token_hex(4)}"

    def _parse(self, txn_id: str, tag: str) -> RedisHandle | None:
        parts = txn_id.split("~")
        if len(parts) != 5 or not _SINK_ID.match(parts[0]) or not all(p.isdigit() for p in parts[1:4]):
            return None
        return RedisHandle(txn_id, parts[0], int(parts[1]), int(parts[2]), int(parts[3]), hash_tag=tag, staged=-1)

    def begin_transaction(self, context: TransactionContext) -> _RedisTxn:
        """Open a transaction (in memory: nothing reaches Redis before :meth:`pre_commit`).

        Raises:
            ConfigurationError: the slot check is on and a key template with a fixed slot
                is outside the sink's slot.
            SinkUnavailableError: the slot check needed the server and could not reach it.
        """
        tag = self.hash_tag(context.sink_id)
        if self._slot_check_on():
            want = key_slot(tag)
            for c in self._compiled:
                got = c.key.fixed_slot()
                if got is not None and got != want:
                    raise ConfigurationError(self._slot_message(f"key template {c.op.key!r}", got, tag, want, c.what))
        return _RedisTxn(context, self._txn_id(context), tag, [{} for _ in self._compiled])

    def invoke(self, txn: _RedisTxn, value: dict[str, Any]) -> None:
        """Add one row (a dict of column -> value).

        Raises:
            ConfigurationError: a referenced column is missing or null, a value has the
                wrong type for its op, a key is outside the slot, or two ops write one key.
        """
        cols = {}
        for c in self._compiled:
            for name in c.columns():
                if name not in value:
                    raise ConfigurationError(f"{c.what} references column {name!r}, which the row does not have")
                cols[name] = [value[name]]
        if any(c.field_pairs is None and isinstance(c.op, HSetOp | XAddOp) for c in self._compiled):
            for k, v in value.items():
                cols.setdefault(k, [v])
        self._add(txn, cols, list(value), 1)

    def invoke_batch(self, txn: _RedisTxn, batch: pa.RecordBatch) -> None:
        """Add an Arrow record batch (columns converted once per batch).

        Raises:
            ConfigurationError / SchemaMismatchError: as :meth:`invoke`.
        """
        names = batch.schema.names
        needed: set[str] = set()
        for c in self._compiled:
            needed |= c.columns()
        if any(c.field_pairs is None and isinstance(c.op, HSetOp | XAddOp) for c in self._compiled):
            needed |= set(names)
        cols = {}
        for name in needed:
            if name not in names:
                raise SchemaMismatchError(f"the mapping references column {name!r}, which the batch does not "
                                          f"have (columns: {', '.join(names)})")
            cols[name] = batch.column(names.index(name)).to_pylist()
        self._add(txn, cols, list(names), batch.num_rows)

    def _add(self, txn: _RedisTxn, cols: Mapping[str, list[Any]], all_columns: list[str], n: int) -> None:
        slot_check = self._slot_check_on()
        want = key_slot(txn.tag)
        for c in self._compiled:
            keys = c.key.render(cols, n, f"{c.what} key")
            keys = [k.decode("utf-8", "surrogateescape") if isinstance(k, bytes) else k for k in keys]
            self._own(txn, c, keys, slot_check and c.key.fixed_slot() is None, want)
            st = txn.state[c.index]
            op = c.op
            if isinstance(op, SetOp):
                vals = c.value.render(cols, n, f"{c.what} value")  # type: ignore[union-attr]
                ttls = self._ints(c, cols, n, "ttl", 1, MAX_TTL_S) if c.number is not None else [None] * n
                for k, v, t in zip(keys, vals, ttls, strict=True):
                    st[k] = (v, t)
            elif isinstance(op, HSetOp | XAddOp):
                pairs = c.field_pairs or tuple(
                    (_Template.compile(_escape(a), "field"), _Template.compile("{" + a + "}", "column"))
                    for a in all_columns)
                rendered = [(f.render(cols, n, f"{c.what} field"), v.render(cols, n, f"{c.what} value"))
                            for f, v in pairs]
                if isinstance(op, HSetOp):
                    for i, k in enumerate(keys):
                        h = st.setdefault(k, {})
                        for fs, vs in rendered:
                            h[_text(fs[i])] = vs[i]
                else:
                    for i, k in enumerate(keys):
                        entry: list[Any] = []
                        for fs, vs in rendered:
                            entry.append(fs[i])
                            entry.append(vs[i])
                        st.setdefault(k, []).append(entry)
            elif isinstance(op, IncrByOp):
                for k, d in zip(keys, self._ints(c, cols, n, "by", -COUNTER_LIMIT, COUNTER_LIMIT), strict=True):
                    st[k] = st.get(k, 0) + d
            elif isinstance(op, HIncrByOp):
                fields = c.field.render(cols, n, f"{c.what} field")  # type: ignore[union-attr]
                deltas = self._ints(c, cols, n, "by", -COUNTER_LIMIT, COUNTER_LIMIT)
                for k, f, d in zip(keys, fields, deltas, strict=True):
                    h = st.setdefault(k, {})
                    f = _text(f)
                    h[f] = h.get(f, 0) + d
            elif isinstance(op, RPushOp):
                vals = c.value.render(cols, n, f"{c.what} value")  # type: ignore[union-attr]
                for k, v in zip(keys, vals, strict=True):
                    st.setdefault(k, []).append(v)
            elif isinstance(op, ZAddOp):
                members = c.value.render(cols, n, f"{c.what} member")  # type: ignore[union-attr]
                for k, m, s in zip(keys, members, self._scores(c, cols, n), strict=True):
                    st.setdefault(k, {})[m] = s
        txn.rows += n

    def _own(self, txn: _RedisTxn, c: _Compiled, keys: list[str], check_each: bool, want: int) -> None:
        owner = txn.owner
        for k in dict.fromkeys(keys):
            o = owner.setdefault(k, c.index)
            if o != c.index:
                other = self._compiled[o]
                raise ConfigurationError(
                    f"key {k!r} is written by {other.what} and {c.what} in one transaction: give each op of the "
                    f"mapping its own keys (effects of two ops on one key would depend on their order)")
            if check_each and key_slot(k) != want:
                raise ConfigurationError(self._slot_message(f"target key {k!r}", key_slot(k), txn.tag, want, c.what))

    @staticmethod
    def _ints(c: _Compiled, cols: Mapping[str, list[Any]], n: int, what: str, lo: int, hi: int) -> list[int]:
        assert c.number is not None
        vals = c.number.values(cols, n)
        if c.number.column is None:
            return vals
        for v in vals:
            if v is None:
                raise _null(c.number.column, f"{c.what} {what}")
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigurationError(
                    f"{c.what} {what}: column {c.number.column!r} holds {v!r} ({type(v).__name__}); {c.op.OP} "
                    f"needs an integer")
            if not lo <= v <= hi:
                raise ConfigurationError(f"{c.what} {what}: {v} is outside {lo}..{hi}")
        return vals

    @staticmethod
    def _scores(c: _Compiled, cols: Mapping[str, list[Any]], n: int) -> list[str]:
        assert c.number is not None
        out = []
        for v in c.number.values(cols, n):
            if v is None:
                raise _null(str(c.number.column), f"{c.what} score")
            if isinstance(v, decimal.Decimal):
                v = float(v)
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ConfigurationError(f"{c.what} score: {v!r} ({type(v).__name__}) is not a number; ZADD needs "
                                         f"a numeric score")
            if isinstance(v, float) and math.isnan(v):
                raise ConfigurationError(f"{c.what} score is NaN; ZADD needs a number")
            out.append(str(v) if isinstance(v, int) else repr(v))
        return out

    # -- staging ---------------------------------------------------------------------------
    def _elements(self, txn: _RedisTxn) -> list[Any]:
        """The staging list: check groups, then apply groups of <= MAX_ARGS arguments."""
        out: list[Any] = []
        m = lua.MAX_ARGS

        def group(cmd: str, args: Sequence[Any]) -> None:
            out.append(f"{cmd} {len(args)}")
            out.extend(args)

        def chunked(cmd: str, head: Sequence[Any], items: Sequence[Any], width: int) -> None:
            step = max(width, ((m - len(head)) // width) * width)
            for i in range(0, len(items), step):
                group(cmd, [*head, *items[i: i + step]])

        for c, st in zip(self._compiled, txn.state, strict=True):
            if st:
                chunked("?T", [c.op.REDIS_TYPE, c.op.OP], list(st), 1)
        for c, st in zip(self._compiled, txn.state, strict=True):
            if st and isinstance(c.op, IncrByOp):
                chunked("?I", [c.op.OP], list(st), 1)
            elif st and isinstance(c.op, HIncrByOp):
                flat = [x for k, h in st.items() for f in h for x in (k, f)]
                chunked("?H", [c.op.OP], flat, 2)
        for c, st in zip(self._compiled, txn.state, strict=True):
            op = c.op
            if isinstance(op, SetOp):
                for k, (v, t) in st.items():
                    group("SET", [k, v] if t is None else [k, v, "EX", str(t)])
            elif isinstance(op, HSetOp):
                for k, h in st.items():
                    chunked("HSET", [k], [x for f, v in h.items() for x in (f, v)], 2)
            elif isinstance(op, IncrByOp):
                for k, d in st.items():
                    self._check_delta(c, k, d)
                    group("INCRBY", [k, str(d)])
            elif isinstance(op, HIncrByOp):
                for k, h in st.items():
                    for f, d in h.items():
                        self._check_delta(c, k, d)
                        group("HINCRBY", [k, f, str(d)])
            elif isinstance(op, XAddOp):
                for k, entries in st.items():
                    for e in entries:
                        if len(e) + 2 > m:
                            raise ConfigurationError(f"{c.what}: an entry has {len(e) // 2} fields; at most "
                                                     f"{(m - 2) // 2} are supported")
                        group("XADD", [k, "*", *e])
            elif isinstance(op, RPushOp):
                for k, vals in st.items():
                    chunked("RPUSH", [k], vals, 1)
            elif isinstance(op, ZAddOp):
                for k, zs in st.items():
                    chunked("ZADD", [k], [x for mem, s in zs.items() for x in (s, mem)], 2)
        return out

    @staticmethod
    def _check_delta(c: _Compiled, key: str, d: int) -> None:
        if abs(d) > COUNTER_LIMIT:
            raise ConfigurationError(f"{c.what}: the deltas for key {key!r} add up to {d} in one transaction, "
                                     f"beyond +-{COUNTER_LIMIT}; write fewer rows per partition")

    def pre_commit(self, txn: _RedisTxn) -> RedisHandle:
        """Stage the transaction's writes durably and mark it prepared.

        Registers the transaction (``ZADD P:txns``), pushes its staging list in calls of
        at most 1000 elements (each refused once the transaction was rolled back, so a
        zombie attempt cannot re-create staging), then ``prepare`` checks the staging's
        length and the target keys' types and records it prepared. With appendfsync
        always, every step is on disk when its reply arrives.

        Raises:
            RedisTargetError: a target key has the wrong type or a counter a non-integer
                value (nothing was applied; :meth:`rollback` removes the staging).
            ConfigurationError: a counter delta is beyond +-10^18 in this transaction.
            SinkError / SinkUnavailableError: the server failed or the transaction was
                rolled back meanwhile.
        """
        ctx = txn.context
        elements = self._elements(txn)
        keys = self.keys_for(ctx.sink_id, txn.tag)
        staging = keys.staging(txn.txn_id)
        client = self._client()
        self._load(client)
        step = lua.MAX_ARGS
        for attempt in (0, 1):
            pipe = client.pipeline(transaction=False)
            pipe.zadd(keys.txns, {txn.txn_id: ctx.batch_id}, nx=True)
            for i in range(0, len(elements), step):
                self._call(pipe, "stage", [keys.txns, staging], [txn.txn_id, *elements[i: i + step]])
            self._call(pipe, "prepare", [keys.txns, keys.prepared, staging], [txn.txn_id, len(elements)])
            txn.registered = True
            try:
                replies = pipe.execute(raise_on_error=False)
            except rex.RedisError as exc:
                raise self._map_error(exc, f"stage transaction {txn.txn_id}") from None
            errors = [r for r in replies if isinstance(r, Exception)]
            if errors and attempt == 0 and any(_missing_script(e) for e in errors):
                self._abort_keys(keys, txn.txn_id)  # start over with the library reloaded
                self._load(client, force=True)
                continue
            if errors:
                raise self._map_error(errors[0], f"stage transaction {txn.txn_id}")
            for r in replies[1:-1]:
                if _decode(r)[0] != "OK":
                    raise SinkError(f"transaction {txn.txn_id} was rolled back while it was being staged "
                                    f"(recovery treated this attempt as an orphan); the task can be retried")
            self._check_reply(_decode(replies[-1]), txn.txn_id, "prepare")
            break
        txn.prepared = True
        return RedisHandle(txn.txn_id, ctx.sink_id, ctx.batch_id, ctx.partition_id, ctx.attempt_id,
                           hash_tag=txn.tag, staged=len(elements))

    def _check_reply(self, reply: list[str], txn_id: str, step: str) -> None:
        status = reply[0]
        if status in ("PREPARED", "COMMITTED"):
            return
        if status == "WRONGTYPE":
            key, actual, op, want = reply[1], reply[2], reply[3], reply[4]
            raise RedisTargetError(
                f"cannot {step} {txn_id}: target key {key!r} is a Redis {actual}, but {op} needs a {want} (or no "
                f"key); nothing was applied. Delete or rename the key, or change the mapping",
                key=key, redis_type=actual, op=op)
        if status == "NOTINT":
            key, fld, op = reply[1], reply[2], reply[3]
            where = f"field {fld!r} of hash {key!r}" if fld else f"key {key!r}"
            raise RedisTargetError(
                f"cannot {step} {txn_id}: {where} does not hold an integer within +-{COUNTER_LIMIT}, so {op} could "
                f"fail; nothing was applied. Fix or delete the value", key=key,
                redis_type="hash" if fld else "string", op=op, field=fld)
        if status == "ABORTED":
            raise SinkError(f"cannot {step} {txn_id}: it was rolled back (recovery treated it as an orphan)")
        if status == "UNPREPARED":
            raise ProtocolError(f"cannot {step} {txn_id}: it was never prepared (its staging is incomplete)")
        if status == "DAMAGED":
            raise SinkError(f"cannot {step} {txn_id}: its staging is damaged ({' '.join(reply[1:])}); "
                            f"nothing was applied")
        raise SinkError(f"cannot {step} {txn_id}: unexpected reply {reply!r}")

    def rollback(self, txn: _RedisTxn) -> None:
        """Discard an open transaction; if :meth:`pre_commit` got as far as Redis, delete
        what it staged. Never raises for a transaction that is already gone (errors are
        logged: recovery removes the staging later through :meth:`list_prepared`)."""
        txn.state = [{} for _ in self._compiled]
        txn.owner.clear()
        if not txn.registered:
            return
        keys = self.keys_for(txn.context.sink_id, txn.tag)
        try:
            self._abort_keys(keys, txn.txn_id)
        except SinkError as exc:
            log.warning("twopc redis: could not roll back %s (recovery will): %s", txn.txn_id, exc)

    # -- driver side ------------------------------------------------------------------------
    def _handle_keys(self, handle: TransactionHandle) -> RedisKeys:
        if not isinstance(handle, RedisHandle):
            raise ProtocolError(f"RedisSink got a {type(handle).__name__}, not a RedisHandle")
        parsed = self._parse(handle.txn_id, "")
        if parsed is None or parsed.sink_id != handle.sink_id:
            raise ProtocolError(f"malformed Redis transaction id {handle.txn_id!r}")
        return self.keys_for(handle.sink_id, handle.hash_tag or None)

    def commit(self, handle: RedisHandle) -> CommitOutcome:
        """Run the commit function: one atomic server-side call.

        Returns:
            ``COMMITTED`` (checks passed, writes applied, marker recorded, staging
            deleted); ``ALREADY_COMMITTED`` when the marker exists (nothing changes);
            ``LOST`` when there is neither a prepared staging nor a marker.

        Raises:
            RedisTargetError: a target key has the wrong type (or a counter a
                non-integer); nothing was applied and the staging is kept, so the commit
                can be retried once the key is fixed.
            ProtocolError: the handle is malformed or the transaction was never prepared.
            SinkUnavailableError / SinkError: the server failed; the transaction is
                unchanged, or was committed (a retry answers ``ALREADY_COMMITTED``).
        """
        keys = self._handle_keys(handle)
        reply = self._run("commit", [keys.txns, keys.prepared, keys.staging(handle.txn_id), keys.committed],
                          [handle.txn_id, handle.batch_id], f"commit {handle.txn_id}")
        if reply[0] == "ALREADY":
            return CommitOutcome.ALREADY_COMMITTED
        if reply[0] == "LOST":
            log.error("twopc redis: %s is neither prepared nor committed on %s", handle.txn_id, self._where())
            return CommitOutcome.LOST
        self._check_reply(reply, handle.txn_id, "commit")
        return CommitOutcome.COMMITTED

    def _abort_keys(self, keys: RedisKeys, txn_id: str) -> bool:
        """Delete *txn_id*'s staging; True when it existed. Raises ProtocolError when the
        transaction was committed."""
        reply = self._run("abort", [keys.txns, keys.prepared, keys.staging(txn_id), keys.committed],
                          [txn_id], f"roll back {txn_id}")
        if reply[0] == "COMMITTED":
            raise ProtocolError(f"asked to roll back {txn_id}, but it was already committed to {self._where()} "
                                f"(its commit marker exists)")
        return reply[0] == "ABORTED" and int(reply[1]) > 0

    def abort(self, handle: RedisHandle) -> None:
        """Delete the staging, the prepared entry and the registration of the handle's
        transaction. Idempotent: one that is already gone is fine.

        Raises:
            ProtocolError: it had been committed (its marker exists), or the handle is malformed.
            SinkError / SinkUnavailableError: the server failed; retry.
        """
        self._abort_keys(self._handle_keys(handle), handle.txn_id)

    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> list[RedisHandle]:
        """Transactions of *sink_id* (and *batch_id*) that are registered and neither
        committed nor rolled back, from the ``P:txns`` sorted set (no SCAN). Includes
        attempts that died while staging (not yet prepared): rolling them back removes
        their partial staging. ``staged`` is ``-1`` in the returned handles.

        Raises:
            SinkError / SinkUnavailableError: the server failed.
        """
        keys = self.keys_for(sink_id)
        lo, hi = ("-inf", "+inf") if batch_id is None else (batch_id, batch_id)
        try:
            members = self._client().zrangebyscore(keys.txns, lo, hi)
        except rex.RedisError as exc:
            raise self._map_error(exc, "list prepared transactions") from None
        tag = self.hash_tag(sink_id)
        out = []
        for m in members:
            txn_id = m.decode() if isinstance(m, bytes) else str(m)
            h = self._parse(txn_id, tag)
            if h is None or h.sink_id != sink_id:
                log.warning("twopc redis: ignoring malformed transaction id %r in %s", txn_id, keys.txns)
                continue
            out.append(h)
        return sorted(out, key=lambda h: (h.batch_id, h.txn_id))

    def purge_committed(self, sink_id: str, below_batch: int) -> None:
        """Trim *sink_id*'s commit markers of batches ``< below_batch`` (best effort: a
        failure is logged, the next purge retries)."""
        try:
            removed = self.purge_markers(sink_id, below_batch)
        except SinkError as exc:
            log.warning("twopc redis: could not purge markers of sink %s below batch %s: %s",
                        sink_id, below_batch, exc)
            return
        log.debug("twopc redis: purged %s markers of sink %s below batch %s", removed, sink_id, below_batch)

    def purge_markers(self, sink_id: str, below_batch: int) -> int:
        """Delete the markers of *sink_id*'s batches ``< below_batch``; returns how many.

        Raises:
            SinkError / SinkUnavailableError: the server failed.
        """
        keys = self.keys_for(sink_id)
        try:
            return int(self._client().zremrangebyscore(keys.committed, "-inf", f"({int(below_batch)}"))
        except rex.RedisError as exc:
            raise self._map_error(exc, "purge commit markers") from None

    def is_committed(self, handle: RedisHandle) -> bool:
        """True when the handle's commit marker exists."""
        keys = self._handle_keys(handle)
        try:
            return self._client().zscore(keys.committed, handle.txn_id) is not None
        except rex.RedisError as exc:
            raise self._map_error(exc, "read commit markers") from None


def _text(v: Any) -> str:
    return v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v)


def _decode(reply: Any) -> list[str]:
    if not isinstance(reply, list | tuple) or not reply:
        return [repr(reply)]
    return [_text(x) for x in reply]


def _missing_script(exc: BaseException) -> bool:
    return isinstance(exc, rex.NoScriptError) or "function not found" in str(exc).lower()


def _normalize_tag(tag: str) -> str:
    t = tag.strip()
    inner = t[1:-1] if t.startswith("{") and t.endswith("}") else t
    if not inner or "{" in inner or "}" in inner:
        raise ConfigurationError(f"hashTag {tag!r} is invalid: give a non-empty tag without braces inside, "
                                 f"like shop or {{shop}}")
    return "{" + inner + "}"


def _split_url(url: str) -> tuple[str, str | None]:
    """The URL without its password, and the password (percent-decoded)."""
    raw = url.strip()
    try:
        u = urllib.parse.urlsplit(raw)
        _ = u.port
    except ValueError:
        raise ConfigurationError("url is not a valid Redis URL: use redis://host:port/db or rediss://host:port/db") \
            from None
    if u.scheme not in ("redis", "rediss"):
        raise ConfigurationError(f"url must start with redis:// or rediss://, got a {u.scheme or 'schemeless'!r} URL")
    password = urllib.parse.unquote(u.password) if u.password is not None else None
    netloc = u.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if u.port is not None:
        netloc += f":{u.port}"
    if u.username:
        netloc = f"{u.username}@{netloc}"
    query = urllib.parse.parse_qsl(u.query, keep_blank_values=True)
    if any(k.lower() == "password" for k, _ in query):
        password = next(v for k, v in query if k.lower() == "password")
        query = [(k, v) for k, v in query if k.lower() != "password"]
    clean = urllib.parse.urlunsplit((u.scheme, netloc, u.path, urllib.parse.urlencode(query), ""))
    return clean, password


class RedisDataSource(TwoPhaseCommitDataSource):
    """``format("twopc-redis")``: exactly-once Redis writes."""

    sink_class = RedisSink
    format_name = "twopc-redis"
