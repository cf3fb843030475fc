"""One pipeline of commands, encoded in bulk: a staging sends hundreds of thousands of small
arguments, and redis-py's per-argument encoder costs about five times one ``bytes`` join.
Otherwise it behaves as redis-py's non-transactional pipeline (which a cluster client gets).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import redis
import redis.exceptions as rex

__all__ = ["encode_commands", "run_pipeline"]


def encode_commands(commands: Sequence[Sequence[Any]], encoding: str = "utf-8",
                    errors: str = "strict") -> list[bytes]:
    """*commands* as RESP arrays, one ``bytes`` per command, encoded as redis-py does (its
    DataError for a bool or another type)."""
    out: list[bytes] = []
    for cmd in commands:
        enc: list[bytes] = []
        for a in cmd:
            t = type(a)
            if t is str:
                enc.append(a.encode(encoding, errors))
            elif t is bytes:
                enc.append(a)
            elif t is int or t is float:
                enc.append(repr(a).encode())
            else:
                raise rex.DataError(f"Invalid input of type: '{t.__name__}'. Convert to a bytes, string, int or "
                                    f"float first.")
        out.append(b"*%d\r\n" % len(enc) + b"".join([b"$%d\r\n%b\r\n" % (len(a), a) for a in enc]))
    return out


def run_pipeline(client: Any, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Send *commands* in one round trip (re-sent per the client's retry policy); one reply per
    command, an error reply as its ResponseError in its slot."""
    if type(client) is not redis.Redis:  # a cluster (redis-py routes every command by slot), or another client
        pipe = client.pipeline(transaction=False)
        for cmd in commands:
            pipe.execute_command(*cmd)
        return cast("list[Any]", pipe.execute(raise_on_error=False))
    pool = client.connection_pool
    try:
        conn = pool.get_connection()
    except TypeError:  # redis-py before 5.3 takes a command name (later ones warn about it)
        conn = pool.get_connection("PIPELINE")
    try:
        encoder = conn.encoder
        data = encode_commands(commands, encoder.encoding, encoder.encoding_errors)
        return conn.retry.call_with_retry(lambda: _exchange(conn, data, len(commands)),
                                          lambda _error: conn.disconnect())
    except BaseException:
        conn.disconnect()  # replies may be left unread: the connection must not be reused
        raise
    finally:
        pool.release(conn)


def _exchange(conn: Any, data: list[bytes], n: int) -> list[Any]:
    conn.send_packed_command(data)  # one sendall per command: the server starts on the first
    replies: list[Any] = []
    for _ in range(n):
        try:
            replies.append(conn.read_response())
        except rex.ResponseError as exc:
            replies.append(exc)
    return replies
