"""Rows the Redis sink refuses one by one: name them, or route them to a dead-letter stream.

A row is refused when folding it raises :class:`~twopc.ConfigurationError`: a null or
non-integer counter delta, a delta beyond +-10^18, a NaN score, a key rendered from the row
that falls outside the sink's slot or is written by two ops of the mapping.

- Without ``deadLetterStream`` the task fails with that error, prefixed with the row's entry
  (``entry orders 1700000000000-3: ...``; found by folding the batch's rows one at a time
  into a scratch copy, only on this failing path).
- With it, each batch is folded into a scratch transaction first and merged into the real
  one when it folds whole (the cost of a merge; nothing else changes when no row is
  refused). A batch that does not fold whole is folded row by row; a refused row becomes an
  ``XADD`` to the dead-letter stream (fields ``stream``, ``id``, ``reason``, ``sink``,
  ``batch``, ``partition``, ``row``) staged in the same transaction, so the FCALL that
  commits the batch adds it, and a rollback drops it.
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

__all__ = ["DEAD_LETTER_FIELDS", "RowFolder", "dead_letter_op"]

log = logging.getLogger("twopc.sinks.redis")

#: the fields of a dead-letter entry
DEAD_LETTER_FIELDS = ("stream", "id", "reason", "sink", "batch", "partition", "row")

Fold = Callable[[RedisTxn, Mapping[str, list[Any]], list[str], int], None]


def dead_letter_op(key: str, index: int) -> Compiled:
    """The compiled ``XADD`` of dead-letter entries to *key* (a literal key), as op *index*.

    Raises:
        ConfigurationError: *key* is empty.
    """
    if not key:
        raise ConfigurationError("deadLetterStream is empty: give a stream key or leave the option out")
    literal = key.replace("{", "{{").replace("}", "}}")
    return _compile(index, XAddOp(literal, columns=DEAD_LETTER_FIELDS))


def _merge(dst: dict[str, Any], src: dict[str, Any]) -> None:
    """Fold *src* (effects of later rows) into *dst*, as folding those rows into *dst* would:
    counters add up, XADD entries and RPUSH values append, hash fields and sorted-set members
    merge one by one, a SET value is replaced."""
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
    """Folds rows into a transaction, naming or dead-lettering the rows it refuses.

    Args:
        compiled: the mapping's ops.
        fold: folds columns into a transaction (the sink's slot rules applied).
        dead_letter: the compiled dead-letter op (:func:`dead_letter_op`), or ``None``.
    """

    def __init__(self, compiled: Sequence[Compiled], fold: Fold, dead_letter: Compiled | None) -> None:
        self._compiled = list(compiled)
        self._fold = fold
        self._dead_letter = dead_letter

    def fold(self, txn: RedisTxn, cols: Mapping[str, list[Any]], all_columns: list[str], n: int,
             rows: Callable[[], list[dict[str, Any]]]) -> None:
        """Fold rows 0..n-1 of *cols* into *txn*; *rows* gives the same rows as dicts (only
        called when a row is refused).

        Raises:
            ConfigurationError: a row is refused and there is no dead-letter stream (the
                message starts with the row's entry); or the dead-letter route itself failed.
        """
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
        """Fold *n* rows into *scratch*; the error that refused one, if any."""
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
    if isinstance(v, bytes):
        return v.decode("utf-8", "backslashreplace")
    return str(v)

