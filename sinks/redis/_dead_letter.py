"""Rows the Redis sink refuses (folding raises :class:`~twopc.ConfigurationError`): name them,
or route them to a dead-letter stream.

Without ``deadLetterStream`` the task fails with the error prefixed with the row's entry
(``entry orders 1700000000000-3: ...``). With it, a batch is folded into a scratch copy and
merged when it folds whole, else row by row; a refused row becomes an ``XADD`` of
:data:`DEAD_LETTER_FIELDS` staged in the same transaction, committed or rolled back with it.
"""

from __future__ import annotations

import collections
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from twopc import ConfigurationError

from .._entry import entry_name
from ._fold import RedisTxn
from ._mapping import Compiled, XAddOp, _compile
from ._templates import escape

__all__ = ["DEAD_LETTER_FIELDS", "RowFolder", "dead_letter_op"]

log = logging.getLogger("twopc.sinks.redis")

#: the fields of a dead-letter entry
DEAD_LETTER_FIELDS = ("stream", "id", "reason", "sink", "batch", "partition", "row")

Fold = Callable[[RedisTxn, Mapping[str, list[Any]], list[str], int], None]


def dead_letter_op(key: str, index: int) -> Compiled:
    """The compiled ``XADD`` of dead letters to literal *key*, as op *index*; ConfigurationError when empty."""
    if not key:
        raise ConfigurationError("deadLetterStream is empty: give a stream key or leave the option out")
    return _compile(index, XAddOp(escape(key), columns=DEAD_LETTER_FIELDS))


def _merge(dst: dict[str, Any], src: dict[str, Any]) -> None:
    """Fold *src* (effects of later rows) into *dst* as folding those rows would have."""
    for k, v in src.items():
        have = dst.get(k)
        if isinstance(v, dict) and have is not None:
            _merge(have, v)
        elif isinstance(v, list) and have is not None:
            have.extend(v)
        elif isinstance(v, int) and have is not None:
            dst[k] = have + v
        else:
            dst[k] = v


class RowFolder:
    """Folds rows into a transaction with *fold*, naming or dead-lettering (*dead_letter*) the refused."""

    def __init__(self, compiled: Sequence[Compiled], fold: Fold, dead_letter: Compiled | None) -> None:
        self._compiled = list(compiled)
        self._fold = fold
        self._dead_letter = dead_letter

    def fold(self, txn: RedisTxn, cols: Mapping[str, list[Any]], all_columns: list[str], n: int,
             rows: Callable[[], list[dict[str, Any]]]) -> None:
        """Fold rows 0..n-1 of *cols* into *txn* (*rows*: them as dicts, once one is refused);
        ConfigurationError for a refused row without a dead-letter stream, or a failed route."""
        if self._dead_letter is None:
            try:
                self._fold(txn, cols, all_columns, n)
            except ConfigurationError as exc:  # name the first row that does not fold after the ones before it
                scratch = self._scratch(txn)
                bad = next((i for i in range(n) if self._refusal(scratch, _row(cols, i), all_columns, 1)), None)
                raise exc if bad is None else type(exc)(f"{entry_name(rows()[bad])}: {exc}") from None
            return
        if self._refusal(scratch := self._scratch(txn), cols, all_columns, n) is None:
            self._adopt(txn, scratch, n)
            return
        full = rows()
        for i in range(n):
            refused = self._refusal(scratch := self._scratch(txn), _row(cols, i), all_columns, 1)
            if refused is None:
                self._adopt(txn, scratch, 1)
            else:
                self._bury(txn, full[i], refused)

    def _scratch(self, txn: RedisTxn) -> RedisTxn:
        s = RedisTxn(txn.context, txn.txn_id, txn.tag, [{} for _ in txn.state])
        s.owner = collections.ChainMap({}, txn.owner)  # type: ignore[assignment]  # reads see txn's owners, writes stay here
        return s

    def _refusal(self, scratch: RedisTxn, cols: Mapping[str, list[Any]], all_columns: list[str],
                 n: int) -> ConfigurationError | None:
        try:
            self._fold(scratch, cols, all_columns, n)
        except ConfigurationError as exc:
            return exc
        return None

    def _adopt(self, txn: RedisTxn, scratch: RedisTxn, n: int) -> None:
        for c in self._compiled:
            if scratch.state[c.index]:
                _merge(txn.state[c.index], scratch.state[c.index])
        txn.owner.update(scratch.owner.maps[0])  # type: ignore[attr-defined]  # the ChainMap of _scratch
        txn.rows += n

    def _bury(self, txn: RedisTxn, row: dict[str, Any], exc: ConfigurationError) -> None:
        dead = self._dead_letter
        assert dead is not None
        c = txn.context
        fields = {"stream": row.get("stream"), "id": row.get("id"), "reason": str(exc)[:2000], "sink": c.sink_id,
                  "batch": c.batch_id, "partition": c.partition_id, "row": json.dumps(row, default=_text)}
        key = dead.key.render({}, 1, "deadLetterStream")[0]
        owner = txn.owner.setdefault(key, dead.index)
        if owner != dead.index:
            raise ConfigurationError(f"deadLetterStream {key!r} is also written by mapping[{owner}]: give the "
                                     f"dead letters a key of their own")
        entry = [x for name in DEAD_LETTER_FIELDS for x in (name, "" if fields[name] is None else _text(fields[name]))]
        txn.state[dead.index].setdefault(key, []).append(entry)
        log.warning("twopc redis: %s of batch %s refused, routed to dead-letter stream: %s",
                    entry_name(row), c.batch_id, exc)


def _row(cols: Mapping[str, list[Any]], i: int) -> dict[str, list[Any]]:
    return {k: v[i:i + 1] for k, v in cols.items()}


def _text(v: Any) -> str:
    return v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else str(v)

