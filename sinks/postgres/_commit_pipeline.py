"""``COMMIT PREPARED`` / ``ROLLBACK PREPARED`` of many ids in pipelines, a large batch over several
connections at once (PostgreSQL merges only overlapping WAL flushes: group commit)."""

from __future__ import annotations

import concurrent.futures
import functools
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import errors as pgerr
from psycopg import sql

from twopc import SinkError

from ..sql._sql_target import SqlTarget
from ._deadline import deadline_pipeline

__all__ = ["MAX_PIPELINES", "PER_PIPELINE", "finish_many"]

#: ids per ``COMMIT PREPARED`` pipeline before a batch is spread over several connections
PER_PIPELINE = 25
#: at most this many pipelines (connections) commit one batch at once
MAX_PIPELINES = 8


def finish_many(target: SqlTarget, verb: str, gids: Sequence[str], still_prepared: set[str] | None) -> dict[str, bool]:
    """``<verb> PREPARED`` for every id, in pipelines: ``{gid: done}`` (``False``: unknown to the
    server). Up to :data:`PER_PIPELINE` ids go in the control connection's pipeline, more over up to
    :data:`MAX_PIPELINES` pooled connections at once. The first unknown id aborts the rest of its
    pipeline, which is sent again after it. Ids not in *still_prepared* (when given) are ``False``.
    Raises the sink's errors (a retry answers the finished ids from the marker)."""
    done = {g: False for g in gids if still_prepared is not None and g not in still_prepared}
    pending = [g for g in gids if g not in done]
    count = min(MAX_PIPELINES, -(-len(pending) // PER_PIPELINE))
    if count <= 1:
        done.update(_finish_in_pipeline(target, verb, pending, target.control_run))
        return done
    chunks = [pending[i::count] for i in range(count)]
    runners = [target.control_run] + [target.run_pooled] * (count - 1)
    pool = _commit_threads()
    futures = [pool.submit(_finish_in_pipeline, target, verb, c, r) for c, r in zip(chunks, runners, strict=True)]
    concurrent.futures.wait(futures)
    if failed := [exc for f in futures if (exc := f.exception()) is not None]:
        raise failed[0]  # every pipeline ran
    for f in futures:
        done.update(f.result())
    return done


def _finish_in_pipeline(target: SqlTarget, verb: str, gids: Sequence[str],
                        run: Callable[[Callable[[Any], int]], int]) -> dict[str, bool]:
    """``<verb> PREPARED`` of *gids* in one pipeline on *run*'s connection; ``{gid: done}``."""
    done: dict[str, bool] = {}
    pending = list(gids)
    while pending:
        try:
            n = run(functools.partial(_pipelined, verb, pending, target.options.net_timeouts().reply))
        except psycopg.Error as exc:
            raise target.map_error(exc, f"{verb} PREPARED of {len(pending)} transaction(s)") from None
        done.update((g, True) for g in pending[:n])
        if n < len(pending):
            done[pending[n]] = False
        pending = pending[n + 1:]
    return done


@functools.cache
def _commit_threads() -> concurrent.futures.ThreadPoolExecutor:
    """This process's pipeline threads, made once (per batch they cost more than the commits);
    a forked child makes its own."""
    return concurrent.futures.ThreadPoolExecutor(MAX_PIPELINES, thread_name_prefix="twopc-commit")


os.register_at_fork(after_in_child=_commit_threads.cache_clear)


#: the characters of a twopc transaction id: no escaping needed inside a string literal
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:~-]+").fullmatch


def _statement(verb: str, gid: str) -> bytes | sql.Composed:
    """``<verb> '<gid>'``, composed by hand for a twopc id (psycopg's literal costs as much as the send)."""
    if _PLAIN_ID(gid):
        return f"{verb} '{gid}'".encode()
    return sql.SQL(verb + " {}").format(sql.Literal(gid))


def _pipelined(verb: str, gids: Sequence[str], reply_seconds: float, pg: psycopg.Connection[Any]) -> int:
    """Send ``<verb> PREPARED`` for *gids* in one pipeline, replies within *reply_seconds*; how many the
    server finished before the first unknown id (any other error, or no reply, raises)."""
    cursors: list[psycopg.Cursor[Any]] = []
    expected = verb + " PREPARED"
    unknown = False
    try:
        with deadline_pipeline(pg, reply_seconds):
            for gid in gids:
                # a plain cursor: the pipeline's deadline covers every reply (one per statement costs more)
                cur = psycopg.Cursor(pg)
                cursors.append(cur)
                cur.execute(_statement(expected, gid))
    except pgerr.UndefinedObject:
        unknown = True
    n = 0
    while n < len(cursors) and cursors[n].statusmessage == expected:
        n += 1
    if not unknown and n != len(gids):
        raise SinkError(f"PostgreSQL answered {cursors[n].statusmessage!r} to {expected} {gids[n]}")
    return n
