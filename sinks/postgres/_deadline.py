"""psycopg cursors whose statements wait at most ``socketTimeout`` for the reply
(see :mod:`twopc.sinks.sql._timeouts`)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import psycopg

from ..sql._timeouts import reply_deadline

__all__ = ["deadline_cursor", "deadline_pipeline"]


@contextlib.contextmanager
def _bounded(fileno: Callable[[], int], seconds: float) -> Iterator[None]:
    """The block's replies wait at most *seconds*, then the connection is closed (OperationalError)."""
    with reply_deadline(fileno, seconds) as deadline:
        try:
            yield
        except psycopg.Error:
            if deadline.fired:
                raise psycopg.OperationalError(f"no reply from the server within {seconds:g} s (socketTimeout); "
                                               f"the connection was closed") from None
            raise


@functools.cache
def deadline_cursor(seconds: float) -> type[psycopg.Cursor[Any]]:
    """A cursor class (one per timeout) whose statements raise :class:`psycopg.OperationalError` and
    close the connection when the server does not answer within *seconds*."""

    class DeadlineCursor(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> DeadlineCursor:
            with _bounded(self.connection.fileno, seconds):
                return super().execute(query, params, **kwargs)

        def executemany(self, query: Any, params_seq: Iterable[Any], **kwargs: Any) -> None:
            with _bounded(self.connection.fileno, seconds):
                super().executemany(query, params_seq, **kwargs)

    return DeadlineCursor


@contextlib.contextmanager
def deadline_pipeline(conn: psycopg.Connection[Any], seconds: float) -> Iterator[None]:
    """``conn.pipeline()`` whose replies wait at most *seconds*."""
    with _bounded(conn.fileno, seconds), conn.pipeline():
        yield
