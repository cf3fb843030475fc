"""``COMMIT PREPARED`` / ``ROLLBACK PREPARED`` of many ids in pipelines: one round trip per
pipeline, a large batch spread over several connections at once (PostgreSQL flushes its WAL
once per ``COMMIT PREPARED``, and only flushes that overlap are merged: group commit)."""

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
    """``<verb> PREPARED`` for every id, in pipelines: ``{gid: done}`` (``False``: the server
    does not know it). Up to :data:`PER_PIPELINE` ids share the control connection's one
    pipeline; a larger batch is spread over up to :data:`MAX_PIPELINES` pipelines on pooled
    connections that run at once. In each pipeline the server commits every id at once
    (the statement cannot run in a transaction block, so its implicit transaction ends
    after it); the first id it does not know aborts the rest of that pipeline, which is
    sent again after it. *still_prepared*, when given: the ids the server still holds
    (asked first when recovering); the others are answered ``False`` without a statement.

    Raises:
        SinkUnavailableError / SinkError: the server failed (other ids may be finished;
            a retry answers them from the marker).
    """
    done: dict[str, bool] = {}
    pending = list(gids)
    if still_prepared is not None:
        done.update((g, False) for g in gids if g not in still_prepared)
        pending = [g for g in gids if g in still_prepared]
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
    """``<verb> PREPARED`` of *gids* in one pipeline on the connection *run* lends
    (again after each id the server does not know); ``{gid: done}``."""
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
    """This process's threads for a batch's pipelines, made once (starting them for every
    batch cost more than the commits at 200 partitions); a forked child makes its own. Two
    callers racing make two executors, one never used: an executor starts its threads on use."""
    return concurrent.futures.ThreadPoolExecutor(MAX_PIPELINES, thread_name_prefix="twopc-commit")


os.register_at_fork(after_in_child=_commit_threads.cache_clear)


#: the characters of a twopc transaction id (:meth:`twopc._xid.Xid.checked`): such an id
#: needs no escaping inside a string literal
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:~-]+").fullmatch


def _statement(verb: str, gid: str) -> bytes | sql.Composed:
    """``<verb> '<gid>'``: composed by hand for a twopc id (psycopg's composition of a
    literal costs about as much as sending the statement), by psycopg for any other."""
    if _PLAIN_ID(gid):
        return f"{verb} '{gid}'".encode()
    return sql.SQL(verb + " {}").format(sql.Literal(gid))


def _pipelined(verb: str, gids: Sequence[str], reply_seconds: float, pg: psycopg.Connection[Any]) -> int:
    """Send ``<verb> PREPARED`` for each of *gids* in one pipeline (autocommit), waiting at
    most *reply_seconds* for the replies; return how many the server finished before the
    first id it does not know (``len(gids)``: all).

    Raises:
        psycopg.Error: any other error, or no reply in time (the ids before it are finished).
    """
    cursors: list[psycopg.Cursor[Any]] = []
    expected = verb + " PREPARED"
    unknown = False
    try:
        with deadline_pipeline(pg, reply_seconds):
            for gid in gids:
                # a plain cursor: the pipeline's deadline covers every reply, and a watchdog
                # armed per statement cost more CPU than the statement at 200 partitions
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
