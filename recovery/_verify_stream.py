"""``twopc verify --stream``: a Redis Stream's entries against the PostgreSQL table a pipeline
writes them to (one row per entry, keyed by ``(stream, id)``), in bounded memory.

The ids are read in order (``XRANGE``) and sent a page at a time as one array parameter; one
statement per page compares it server-side with the table's rows in the page's id interval
(a hash anti-join both ways): counts and a few examples come back, never rows. Every statement
runs in a read-only transaction of its own (ACCESS SHARE for one statement at a time, no temp
table); page size trades memory for scans of the table."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from twopc.sinks._redis.ids import ZERO, EntryId, Range
from twopc.sinks._redis.stream_server import StreamServer
from twopc.sinks.sql._names import TableName

from ._verify import EXAMPLES, PAGE_SIZE, SetCheck

__all__ = ["read_only_session", "verify_stream"]

# A row's id of the form <ms>-<seq> (digits and one dash: no cast can fail on other ids, and a
# regular expression costs ten times as much per row)
_WELL_FORMED = "translate({id}, '0123456789', '') = '-'"
# ... ordered as entry ids are (numbers without leading zeros: by length, then by their digits)
_KEY = ("ROW(length(split_part({id}, '-', 1)), split_part({id}, '-', 1) COLLATE \"C\", "
        "length(split_part({id}, '-', 2)), split_part({id}, '-', 2) COLLATE \"C\")")
_LO = "ROW(%(lo_ms_len)s::int, %(lo_ms)s::text COLLATE \"C\", %(lo_seq_len)s::int, %(lo_seq)s::text COLLATE \"C\")"
_HI = "ROW(%(hi_ms_len)s::int, %(hi_ms)s::text COLLATE \"C\", %(hi_seq_len)s::int, %(hi_seq)s::text COLLATE \"C\")"

_PAGE = """
WITH page(id) AS MATERIALIZED (SELECT unnest(%(ids)s::text[])),
tgt AS MATERIALIZED (
    SELECT t.{idc}::text AS id FROM {table} t
    WHERE t.{sc} = %(stream)s AND {ok} AND {key} > {lo} AND {key} <= {hi}),
counts AS (SELECT p.id, count(g.id) AS n FROM page p LEFT JOIN tgt g ON g.id = p.id GROUP BY p.id),
strangers AS (SELECT g.id FROM tgt g WHERE NOT EXISTS (SELECT 1 FROM page p WHERE p.id = g.id))
SELECT
    (SELECT count(*) FROM counts WHERE n = 0),
    (SELECT count(*) FROM counts WHERE n > 1),
    (SELECT coalesce(sum(n - 1), 0) FROM counts WHERE n > 1),
    (SELECT count(*) FROM tgt),
    (SELECT count(*) FROM strangers),
    ARRAY(SELECT id FROM counts WHERE n = 0 LIMIT {ex}),
    ARRAY(SELECT id FROM counts WHERE n > 1 LIMIT {ex}),
    ARRAY(SELECT id FROM strangers LIMIT {ex})
"""

_OUTSIDE = """
SELECT count(*) FILTER (WHERE NOT {ok} OR t.{idc} IS NULL),
       count(*) FILTER (WHERE {ok} AND {key} <= {lo}),
       count(*) FILTER (WHERE {ok} AND {key} > {hi}),
       ARRAY(SELECT t.{idc}::text FROM {table} t WHERE t.{sc} = %(stream)s AND NOT {ok} LIMIT {ex})
FROM {table} t WHERE t.{sc} = %(stream)s
"""


def read_only_session(pg: psycopg.Connection[Any]) -> None:
    """Make every statement of *pg* (autocommit) run in a read-only transaction."""
    pg.autocommit = True
    pg.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")


def _bounds(lo: EntryId, hi: EntryId) -> dict[str, int | str]:
    out: dict[str, int | str] = {}
    for name, part in (("lo_ms", lo.ms), ("lo_seq", lo.seq), ("hi_ms", hi.ms), ("hi_seq", hi.seq)):
        out[name], out[name + "_len"] = str(part), len(str(part))
    return out


def verify_stream(pg: psycopg.Connection[Any], table: TableName, server: StreamServer, stream: str, *,
                  first: EntryId | None = None, last: EntryId | None = None, group: str | None = None,
                  stream_column: str = "stream", id_column: str = "id", page_size: int = PAGE_SIZE,
                  progress: Callable[[str], None] | None = None) -> SetCheck:
    """Check that *table* holds one row per entry of *stream* with id in ``[first, last]`` (*last*
    default: *group*'s ``last-delivered-id``, else the last entry; *first*: the first id ever, or the
    first entry when the start was trimmed). *pg* must be a :func:`read_only_session`. Raises
    SinkError/SinkUnavailableError when Redis fails, psycopg.Error when PostgreSQL does."""
    subject = f"stream {stream!r} on {server.config.where()} against {table.display()} ({stream_column}, {id_column})"
    check = SetCheck(subject)
    info = server.info(stream)
    if info is None:
        check.cannot_tell.append(f"stream {stream!r} does not exist on {server.config.where()}: check the name")
        return check
    removed = info.added - info.length
    if last is None and group is not None:
        last = server.group_position(stream, group)
        if last is None:
            check.cannot_tell.append(f"stream {stream!r} has no group {group!r} (its groups: "
                                     f"{', '.join(server.group_names(stream) or []) or 'none'})")
            return check
        check.notes.append(f"range ends where group {group!r} stands: {last}")
    last = last or info.last
    lo = first.previous() if first is not None else (
        info.first.previous() if removed > 0 and info.first is not None else ZERO)
    lo = min(lo, last)  # a group behind the stream's first entry: an empty range
    if removed > 0 and (info.deleted_upto > lo or info.first is None or info.first > lo.next()):
        check.cannot_tell.append(
            f"{removed} entr(ies) were removed from the stream (XDEL, XTRIM, MAXLEN) and some may lie in the "
            f"range: a row of a removed entry would look unexpected")
    check.notes.append(f"range ({lo}, {last}]")
    pq = _statement(_PAGE, table, stream_column, id_column)
    entries, prev = server.read(Range(stream, lo, last, 1)), lo
    while len(ids := [e.decode("utf-8") for e, _fields in itertools.islice(entries, page_size)]) == page_size:
        nxt = EntryId.parse(ids[-1])
        _page(pg, pq, check, stream, ids, prev, nxt)
        prev = nxt
        if progress is not None:
            progress(f"verify: {check.expected} entries checked (up to {prev}); lost {check.lost}, duplicated "
                     f"{check.duplicated}, unexpected {check.unexpected}")
    if last > prev:
        _page(pg, pq, check, stream, ids, prev, last)
    malformed, before, after, bad = pg.execute(_statement(_OUTSIDE, table, stream_column, id_column),
                                               {"stream": stream, **_bounds(lo, last)}).fetchone() or (0, 0, 0, [])
    check.unexpected += int(malformed)
    check.found += int(malformed)
    check.add_examples("unexpected", bad)
    check.not_checked.update({k: int(n) for k, n in (("before the range", before), ("after the range", after)) if n})
    return check


def _statement(template: str, table: TableName, stream_column: str, id_column: str) -> sql.Composed:
    ident = sql.Identifier(table.schema, table.name) if table.schema else sql.Identifier(table.name)
    idc, sc = sql.Identifier(id_column), sql.Identifier(stream_column)
    row_id = sql.SQL("t.{}::text").format(idc)
    return sql.SQL(template).format(table=ident, idc=idc, sc=sc, key=sql.SQL(_KEY).format(id=row_id),
                                    ok=sql.SQL(_WELL_FORMED).format(id=row_id), lo=sql.SQL(_LO), hi=sql.SQL(_HI),
                                    ex=sql.Literal(EXAMPLES))


def _page(pg: psycopg.Connection[Any], statement: sql.Composed, check: SetCheck, stream: str, ids: list[str],
          lo: EntryId, hi: EntryId) -> None:
    """Compare the stream's *ids* (every entry in ``(lo, hi]``) with the table's rows there."""
    row = pg.execute(statement, {"ids": ids, "stream": stream, **_bounds(lo, hi)}).fetchone()
    assert row is not None  # an aggregate always answers one row
    lost, duplicated, extra, found, unexpected = (int(v) for v in row[:5])
    check.expected += len(ids)
    check.found += found
    check.lost += lost
    check.duplicated += duplicated
    check.extra_rows += extra
    check.unexpected += unexpected
    for kind, examples in zip(("lost", "duplicated", "unexpected"), row[5:], strict=True):
        check.add_examples(kind, examples)
