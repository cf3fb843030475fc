"""psycopg cursors whose statements wait at most ``socketTimeout`` for the server's reply
(psycopg has no client-side statement timeout: see :mod:`twopc.sinks.sql.connect._timeouts`)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator
from typing import Any

import psycopg

from ..sql.connect._timeouts import reply_deadline

__all__ = ["deadline_cursor", "deadline_pipeline"]


@functools.cache
def deadline_cursor(seconds: float) -> type[psycopg.Cursor[Any]]:
    """A ``psycopg.Cursor`` class (one per timeout) whose ``execute`` / ``executemany``
    raise :class:`psycopg.OperationalError` ("no reply ... within N s") when the server
    does not answer within *seconds*; the connection is then closed (broken)."""

    class DeadlineCursor(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> DeadlineCursor:
            with reply_deadline(self.connection.fileno, seconds) as deadline:
                try:
                    return super().execute(query, params, **kwargs)
                except psycopg.Error:
                    if deadline.fired:
                        raise _no_reply(seconds) from None
                    raise

        def executemany(self, query: Any, params_seq: Iterable[Any], **kwargs: Any) -> None:
            with reply_deadline(self.connection.fileno, seconds) as deadline:
                try:
                    super().executemany(query, params_seq, **kwargs)
                except psycopg.Error:
                    if deadline.fired:
                        raise _no_reply(seconds) from None
                    raise

    return DeadlineCursor


@contextlib.contextmanager
def deadline_pipeline(conn: psycopg.Connection[Any], seconds: float) -> Iterator[None]:
    """``conn.pipeline()`` whose replies (all of them, fetched when the block ends) wait at
    most *seconds*: past it the connection is closed and :class:`psycopg.OperationalError`
    ("no reply ...") raised, as :func:`deadline_cursor` does for one statement."""
    with reply_deadline(conn.fileno, seconds) as deadline:
        try:
            with conn.pipeline():
                yield
        except psycopg.Error:
            if deadline.fired:
                raise _no_reply(seconds) from None
            raise


def _no_reply(seconds: float) -> psycopg.OperationalError:
    return psycopg.OperationalError(
        f"no reply from the server within {seconds:g} s (socketTimeout); the connection was closed")
