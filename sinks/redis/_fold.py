"""The Redis sink's open transaction: rows folded into effects (rules in :mod:`twopc.sinks.redis`),
laid out as the staging list :mod:`._lua` reads."""

from __future__ import annotations

import decimal
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import pyarrow as pa

from twopc import ConfigurationError, TransactionContext
from twopc.spi import SchemaMismatchError

from ._keys import key_slot, slot_message
from ._lua import MAX_ARGS
from ._mapping import COUNTER_LIMIT, MAX_TTL_S, Compiled, HIncrByOp, HSetOp, IncrByOp, RPushOp, SetOp, XAddOp, ZAddOp
from ._templates import Template, as_text, null_error

__all__ = ["ELEMENT_ARGS", "RedisTxn", "batch_columns", "fold", "row_columns", "staging_elements"]

#: About how many arguments one element of the staging list packs (a few hundred KiB).
ELEMENT_ARGS = 8192


@dataclass(eq=False)
class RedisTxn:
    """One task attempt's open transaction: folded effects, one dict per op of the mapping."""

    context: TransactionContext
    txn_id: str
    tag: str
    state: list[dict[str, Any]]
    owner: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    registered: bool = False
    prepared: bool = False
    acks: dict[str, Any] = field(default_factory=dict)  # stream -> highest EntryId (option ackGroup)

    def clear(self) -> None:
        self.state = [{} for _ in self.state]
        self.owner.clear()


def row_columns(compiled: Sequence[Compiled], row: Mapping[str, Any]) -> dict[str, list[Any]]:
    """*row* as one-row columns; ConfigurationError when it lacks a column the mapping reads."""
    for c in compiled:
        for name in c.columns():
            if name not in row:
                raise ConfigurationError(f"{c.what} references column {name!r}, which the row does not have")
    return {k: [v] for k, v in row.items()}


def batch_columns(compiled: Sequence[Compiled], batch: pa.RecordBatch) -> dict[str, list[Any]]:
    """The columns of *batch* the mapping reads; SchemaMismatchError when one is missing."""
    names = batch.schema.names
    every = names if any(c.reads_all_columns for c in compiled) else []
    needed = set(every).union(*(c.columns() for c in compiled))
    cols = {}
    for name in needed:
        if name not in names:
            raise SchemaMismatchError(f"the mapping references column {name!r}, which the batch does not "
                                      f"have (columns: {', '.join(names)})")
        cols[name] = batch.column(names.index(name)).to_pylist()
    return cols


def fold(compiled: Sequence[Compiled], txn: RedisTxn, cols: Mapping[str, list[Any]], all_columns: list[str],
         n: int, *, slot_check: bool, tag_option_set: bool) -> None:
    """Fold rows 0..n-1 of *cols* into *txn*; ConfigurationError for a null or mistyped cell, a key
    outside the tag's slot (with *slot_check*), or two ops writing one key."""
    want = key_slot(txn.tag)
    for c in compiled:
        keys = c.key.render(cols, n, f"{c.what} key")
        if c.key.exact is not None:  # only "{column}" keeps bytes cells as bytes
            keys = [as_text(k) for k in keys]
        check_each = slot_check and c.key.fixed_slot() is None
        for k in dict.fromkeys(keys):
            o = txn.owner.setdefault(k, c.index)
            if o != c.index:
                raise ConfigurationError(
                    f"key {k!r} is written by {compiled[o].what} and {c.what} in one transaction: give each op "
                    f"of the mapping its own keys (effects of two ops on one key would depend on their order)")
            if check_each and key_slot(k) != want:
                raise ConfigurationError(slot_message(f"target key {k!r}", key_slot(k), txn.tag, c.what,
                                                      tag_option_set=tag_option_set))
        _fold_op(c, txn.state[c.index], keys, cols, all_columns, n)
    txn.rows += n


def _fold_op(c: Compiled, st: dict[str, Any], keys: list[str], cols: Mapping[str, list[Any]],
             all_columns: list[str], n: int) -> None:
    op = c.op
    if isinstance(op, SetOp):
        vals = _render(c, c.value, cols, n, "value")
        ttls = _ints(c, cols, n, "ttl", 1, MAX_TTL_S) if c.number is not None else [None] * n
        st.update(zip(keys, zip(vals, ttls, strict=True), strict=True))
    elif isinstance(op, HSetOp | XAddOp):
        pairs = c.pairs(all_columns)
        rendered = [(f.render(cols, n, f"{c.what} field"), v.render(cols, n, f"{c.what} value")) for f, v in pairs]
        names = [f.constant for f, _ in pairs]
        if isinstance(op, HSetOp) and None not in names and len(set(names)) == len(names):
            # constant, distinct field names (the usual case): the same folding, column by column
            for name, (_, vs) in zip(names, rendered, strict=True):
                for k, v in zip(keys, vs, strict=True):
                    st.setdefault(k, {})[name] = v
        elif isinstance(op, HSetOp):
            for i, k in enumerate(keys):
                h = st.setdefault(k, {})
                for fs, vs in rendered:
                    h[as_text(fs[i])] = vs[i]
        else:
            for i, k in enumerate(keys):
                st.setdefault(k, []).append([x for fs, vs in rendered for x in (fs[i], vs[i])])
    elif isinstance(op, IncrByOp):
        for k, d in zip(keys, _ints(c, cols, n, "by", -COUNTER_LIMIT, COUNTER_LIMIT), strict=True):
            st[k] = st.get(k, 0) + d
    elif isinstance(op, HIncrByOp):
        fields = _render(c, c.field, cols, n, "field")
        for k, f, d in zip(keys, fields, _ints(c, cols, n, "by", -COUNTER_LIMIT, COUNTER_LIMIT), strict=True):
            h = st.setdefault(k, {})
            name = as_text(f)
            h[name] = h.get(name, 0) + d
    elif isinstance(op, RPushOp):
        for k, v in zip(keys, _render(c, c.value, cols, n, "value"), strict=True):
            st.setdefault(k, []).append(v)
    elif isinstance(op, ZAddOp):
        for k, m, s in zip(keys, _render(c, c.value, cols, n, "member"), _scores(c, cols, n), strict=True):
            st.setdefault(k, {})[m] = s


def _render(c: Compiled, template: Template | None, cols: Mapping[str, list[Any]], n: int, what: str) -> list[Any]:
    assert template is not None, f"{c.what} was compiled without its {what}"
    return template.render(cols, n, f"{c.what} {what}")


def _ints(c: Compiled, cols: Mapping[str, list[Any]], n: int, what: str, lo: int, hi: int) -> list[int]:
    assert c.number is not None
    vals = c.number.values(cols, n)
    if c.number.column is None:
        return vals
    for v in vals:
        if v is None:
            raise null_error(c.number.column, f"{c.what} {what}")
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigurationError(
                f"{c.what} {what}: column {c.number.column!r} holds {v!r} ({type(v).__name__}); {c.op.OP} "
                f"needs an integer")
        if not lo <= v <= hi:
            raise ConfigurationError(f"{c.what} {what}: {v} is outside {lo}..{hi}")
    return vals


def _scores(c: Compiled, cols: Mapping[str, list[Any]], n: int) -> list[str]:
    assert c.number is not None
    out = []
    for v in c.number.values(cols, n):
        if v is None:
            raise null_error(str(c.number.column), f"{c.what} score")
        if isinstance(v, decimal.Decimal):
            v = float(v)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ConfigurationError(f"{c.what} score: {v!r} ({type(v).__name__}) is not a number; ZADD needs "
                                     f"a numeric score")
        if isinstance(v, float) and math.isnan(v):
            raise ConfigurationError(f"{c.what} score is NaN; ZADD needs a number")
        out.append(str(v) if isinstance(v, int) else repr(v))
    return out


def _group(out: list[Any], cmd: str, args: list[Any]) -> None:
    out += (cmd, args)


def _chunked(out: list[Any], cmd: str, head: Sequence[Any], items: Sequence[Any], width: int) -> None:
    """Groups of *head* plus as many *items* as fit, *width* items at a time."""
    step = max(width, ((MAX_ARGS - len(head)) // width) * width)
    for i in range(0, len(items), step):
        _group(out, cmd, [*head, *items[i: i + step]])


def staging_elements(compiled: Sequence[Compiled], state: Sequence[dict[str, Any]]) -> list[bytes]:
    """The staging list of *state*: MessagePack arrays ``[cmd, [arg...], cmd, [arg...], ...]`` of about
    :data:`ELEMENT_ARGS` arguments each (check groups first, at most :data:`~._lua.MAX_ARGS` a group), which the
    server-side library decodes with Redis's ``cmsgpack``. Arguments are str or bytes by construction; bytes go as
    MessagePack's raw string type (``cmsgpack`` predates the binary types). ConfigurationError for a counter's
    deltas beyond +-10^18, or an XADD entry with more fields than one call takes."""
    groups: list[Any] = []
    for c, st in zip(compiled, state, strict=True):
        if st:
            _chunked(groups, "?T", [c.op.REDIS_TYPE, c.op.OP], list(st), 1)
    for c, st in zip(compiled, state, strict=True):
        if st and isinstance(c.op, IncrByOp):
            _chunked(groups, "?I", [c.op.OP], list(st), 1)
        elif st and isinstance(c.op, HIncrByOp):
            _chunked(groups, "?H", [c.op.OP], [x for k, h in st.items() for f in h for x in (k, f)], 2)
    for c, st in zip(compiled, state, strict=True):
        _stage_op(groups, c, st)
    out: list[bytes] = []
    start, size = 0, 0
    for i in range(1, len(groups), 2):
        size += len(groups[i])
        if size >= ELEMENT_ARGS or i == len(groups) - 1:
            out.append(msgpack.packb(groups[start: i + 1], use_bin_type=False))
            start, size = i + 1, 0
    return out


def _stage_op(out: list[Any], c: Compiled, st: dict[str, Any]) -> None:
    op = c.op
    if isinstance(op, SetOp):
        for k, (v, t) in st.items():
            _group(out, "SET", [k, v] if t is None else [k, v, "EX", str(t)])
    elif isinstance(op, HSetOp):
        for k, h in st.items():
            _chunked(out, "HSET", [k], [x for f, v in h.items() for x in (f, v)], 2)
    elif isinstance(op, IncrByOp):
        for k, d in st.items():
            _check_delta(c, k, d)
            _group(out, "INCRBY", [k, str(d)])
    elif isinstance(op, HIncrByOp):
        for k, h in st.items():
            for f, d in h.items():
                _check_delta(c, k, d)
                _group(out, "HINCRBY", [k, f, str(d)])
    elif isinstance(op, XAddOp):
        for k, entries in st.items():
            for e in entries:
                if len(e) + 2 > MAX_ARGS:
                    raise ConfigurationError(f"{c.what}: an entry has {len(e) // 2} fields; at most "
                                             f"{(MAX_ARGS - 2) // 2} are supported")
                _group(out, "XADD", [k, "*", *e])
    elif isinstance(op, RPushOp):
        for k, vals in st.items():
            _chunked(out, "RPUSH", [k], vals, 1)
    elif isinstance(op, ZAddOp):
        for k, zs in st.items():
            _chunked(out, "ZADD", [k], [x for mem, sc in zs.items() for x in (sc, mem)], 2)


def _check_delta(c: Compiled, key: str, d: int) -> None:
    if abs(d) > COUNTER_LIMIT:
        raise ConfigurationError(f"{c.what}: the deltas for key {key!r} add up to {d} in one transaction, "
                                 f"beyond +-{COUNTER_LIMIT}; write fewer rows per partition")
