"""``XA COMMIT`` of a batch's prepared transactions in one round trip: one multi-statement query on
the control connection, then one marker lookup of the ids committed. The server stops at the first
failing statement, which is classified as :meth:`MySqlPrepared.finish` does, and the query starts
again after it. Multi-statements are on for that one query only (``COM_SET_OPTION``)."""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import Any, Protocol

import pymysql
from pymysql.constants import COMMAND

from twopc import SinkError

from ..sql._prepared_committer import MarkerTable
from ..sql._sql_target import SqlTarget
from ._errors import ER_XAER_NOTA, errno

__all__ = ["MAX_STATEMENTS", "XaCommitter", "commit_many"]


class XaCommitter(Protocol):
    """What :func:`commit_many` uses of :class:`twopc.sinks.mysql._dialect.MySqlDialect`."""

    @property
    def target(self) -> SqlTarget: ...
    @property
    def markers(self) -> MarkerTable: ...
    def swallowed_commit(self, gid: str) -> SinkError: ...
    def prepared_ids(self, prefix: str) -> list[str]: ...
    def finish(self, verb: str, gid: str) -> bool: ...


#: ``XA COMMIT`` statements per query (far below the default ``max_allowed_packet``)
MAX_STATEMENTS = 500

_MULTI_ON, _MULTI_OFF = 0, 1  # MYSQL_OPTION_MULTI_STATEMENTS_ON / _OFF


def commit_many(sink: XaCommitter, gids: Sequence[str]) -> list[bool]:
    """``XA COMMIT`` each of *gids* in as few round trips as the answers allow: per id ``True``
    (committed, marker checked) or ``False`` (unknown to the server), as ``finish`` answers for one.
    SinkError: the server refused one (those before it are committed), or a marker row is absent."""
    done: list[bool] = []
    pos = 0
    while pos < len(gids):
        chunk = list(gids[pos: pos + MAX_STATEMENTS])
        ok, failed = sink.target.control_run(functools.partial(_commit_run, sink, chunk=chunk))
        if committed := chunk[:ok]:
            markers = sink.markers.among(committed)
            for gid in committed:
                if gid not in markers:
                    raise sink.swallowed_commit(gid)
        done.extend([True] * ok)
        pos += ok
        if failed is None:
            continue
        gid = gids[pos]
        if errno(failed) != ER_XAER_NOTA:
            raise sink.target.map_error(failed, f"XA COMMIT {gid}") from None
        # unknown to the server: gone (False), or still attached to a live session (retried there)
        done.append(gid in sink.prepared_ids(gid) and sink.finish("COMMIT", gid))
        pos += 1
    return done


def _commit_run(sink: XaCommitter, dbapi: Any, *, chunk: list[str]) -> tuple[int, BaseException | None]:
    """Send ``XA COMMIT`` for *chunk* as one query; how many succeeded and the next one's error."""
    _set_multi_statements(dbapi, True)
    ok = 0
    failed: BaseException | None = None
    with dbapi.cursor() as cur:
        try:
            cur.execute(";".join(["XA COMMIT %s"] * len(chunk)), tuple(chunk))
            ok = 1
            while ok < len(chunk) and cur.nextset():
                ok += 1
        except pymysql.err.MySQLError as exc:
            if sink.target.database.is_connection_error(exc):
                raise  # the control connection is dropped as broken: nothing to switch back
            failed = exc
    _set_multi_statements(dbapi, False)
    return ok, failed


def _set_multi_statements(dbapi: Any, on: bool) -> None:
    """Turn multi-statements on or off (``COM_SET_OPTION``, one EOF or error packet back)."""
    dbapi._execute_command(COMMAND.COM_SET_OPTION, struct.pack("<H", _MULTI_ON if on else _MULTI_OFF))
    dbapi._read_packet()
