"""Composite-sink harnesses on real servers: ``format("twopc-composite")`` with a
PostgreSQL table, Redis (an event stream and counters), the file sink, a MariaDB XA table
or a second PostgreSQL server as participants, each configured by prefixed options
(``orders.url``, ``orders.password``...), so the kit's credential checks reach them.

Every harness reads the *first* participant back as its ids and verifies the others agree:
each target holds each id exactly once, the same ids as the first, batch by batch (an id's
batch is the input file it came from), Redis's counter equals its stream, and nothing of
any participant's sink id is left prepared or staged.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import redis
import sqlalchemy as sa

from twopc.recovery import staged_rows_left
from twopc.sinks import RedisSink
from twopc.spi.runtime import CompositeHandle, participant_sink_id
from twopc.testing import fresh_nonce

from ._filesink_helpers import assert_nothing_left, committed_ids
from ._kit_harnesses import MY_DDL, PG_DDL, OwnHarness, _credentials, _pg_prepared, _read, _table, _uid, _xa_recovered

__all__ = ["CompositeHarness", "composite_harness", "per_parity"]


def per_parity(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A participant transform (derived rows): one row per parity of ``id`` with how many
    ids of the batch have it — counters for a dashboard."""
    parity = pc.if_else(pc.equal(pc.bit_wise_and(batch.column("id"), 1), 0), "even", "odd")
    counts = collections.Counter(parity.to_pylist())
    return pa.record_batch({"parity": pa.array(list(counts), pa.string()),
                            "n": pa.array(list(counts.values()), pa.int64())})


def never_prepared(h: CompositeHandle) -> CompositeHandle:
    """A composite handle none of whose parts was ever prepared: every part's Xid (and the
    composite's) with a fresh nonce."""
    return dataclasses.replace(fresh_nonce(h), parts=tuple((name, fresh_nonce(p)) for name, p in h.parts))


@dataclass(repr=False)
class CompositeHarness(OwnHarness):
    """A composite harness: *readers* reads every participant back (name -> ids)."""

    readers: dict[str, Callable[[], list[int]]] = field(default_factory=dict)
    checks: list[Callable[[str], None]] = field(default_factory=list)
    engines: list[sa.Engine] = field(default_factory=list)


def _same_everywhere(readers: dict[str, Callable[[], list[int]]], rows_per_batch: int | None) -> None:
    got = {name: sorted(read()) for name, read in readers.items()}
    first, ids = next(iter(got.items()))
    for name, other in got.items():
        dupes = sorted(i for i, n in collections.Counter(other).items() if n > 1)
        assert not dupes, f"participant {name} holds ids {dupes[:10]} more than once"
        assert other == ids, (f"participant {name} disagrees with {first}: missing {sorted(set(ids) - set(other))[:10]}"
                              f", extra {sorted(set(other) - set(ids))[:10]}")
    if rows_per_batch and ids:  # batch by batch: the kit's input ids are base + batch * rows + i
        base = min(ids) - (min(ids) % rows_per_batch)
        per_batch = {name: collections.Counter((i - base) // rows_per_batch for i in v) for name, v in got.items()}
        assert len(set(map(lambda c: tuple(sorted(c.items())), per_batch.values()))) == 1, per_batch


@contextlib.contextmanager
def composite_harness(kinds: Sequence[str], *, postgres_url: str | None = None, redis_url: str | None = None,
                      mariadb_url: str | None = None, second_postgres_url: str | None = None,
                      tmp_path: Path | None = None, rows_per_batch: int | None = None,
                      keyed: bool = False) -> Iterator[CompositeHarness]:
    """A ``twopc-composite`` harness whose participants are *kinds*, in order: ``orders``
    (PostgreSQL table), ``replica`` (a table on the second PostgreSQL server), ``xa``
    (MariaDB XA table), ``events`` (Redis: INCRBY total and XADD of every id), ``files``
    (file sink, columns ``id, payload``), ``staged`` (``twopc-jdbc`` staging mode on
    PostgreSQL, which a composite refuses: its commit may be refused after the decision).
    *keyed*: every table has a primary key on ``id``."""
    options: dict[str, str] = {"targets": ",".join(kinds)}
    readers: dict[str, Callable[[], list[int]]] = {}
    checks: list[Callable[[str], None]] = []
    engines: list[sa.Engine] = []
    with contextlib.ExitStack() as stack:
        for kind in kinds:
            if kind == "staged":
                assert postgres_url is not None
                table, engine = stack.enter_context(_table(postgres_url, PG_DDL, keyed=keyed))
                where, creds = _credentials(postgres_url)
                options |= {"staged.format": "twopc-jdbc", "staged.url": f"jdbc:postgresql://{where}",
                            "staged.dbtable": table, "staged.commitMode": "staging", "staged.user": creds["user"],
                            "staged.password": creds["password"]}
                readers[kind] = functools.partial(_read, engine, table)
                engines.append(engine)
                checks.append(functools.partial(_nothing_staged, engine))
            elif kind in ("orders", "replica", "xa"):
                url = {"orders": postgres_url, "replica": second_postgres_url, "xa": mariadb_url}[kind]
                assert url is not None, f"participant {kind} needs its server's URL"
                table, engine = stack.enter_context(_table(url, MY_DDL if kind == "xa" else PG_DDL, keyed=keyed))
                where, creds = _credentials(url)
                scheme = "mysql" if kind == "xa" else "postgresql"
                fmt = "twopc.sinks:MySqlXaSink" if kind == "xa" else "twopc-postgres"
                options |= {f"{kind}.format": fmt, f"{kind}.url": f"{scheme}://{where}", f"{kind}.dbtable": table,
                            f"{kind}.user": creds["user"], f"{kind}.password": creds["password"]}
                readers[kind] = functools.partial(_read, engine, table)
                engines.append(engine)
                lister = _xa_recovered if kind == "xa" else _pg_prepared
                checks.append(functools.partial(_nothing_prepared, lister, engine, kind))
            elif kind == "events":
                assert redis_url is not None
                stack.enter_context(_redis_participant(redis_url, options, readers, checks))
            elif kind == "files":
                assert tmp_path is not None
                out = str(tmp_path / f"files-{_uid()}")
                options |= {"files.format": "twopc-file", "files.path": out, "files.columns": "id, payload"}
                readers["files"] = functools.partial(committed_ids, out)
                checks.append(functools.partial(_no_files_left, out))
            else:
                raise ValueError(f"unknown participant kind {kind!r}")

        def verify(sink_id: str) -> None:
            for check in checks:
                check(sink_id)
            _same_everywhere(readers, rows_per_batch)

        yield CompositeHarness("twopc.sinks:CompositeDataSource", options, readers[kinds[0]], verify=verify,
                               never_prepared=never_prepared, name=f"twopc-composite ({' + '.join(kinds)})",
                               handle_kind="twopc.composite", readers=readers, checks=checks,
                               engines=engines)


def _nothing_staged(engine: sa.Engine, sink_id: str) -> None:
    left = staged_rows_left(engine, sink_id=participant_sink_id(sink_id, "staged"))
    assert sum(left.values()) == 0, f"participant staged: staged rows left: {left}"


def _no_files_left(out: str, sink_id: str) -> None:
    assert_nothing_left(out, participant_sink_id(sink_id, "files"))


def _nothing_prepared(lister: Callable[[sa.Engine, str], list[str]], engine: sa.Engine, name: str,
                      sink_id: str) -> None:
    left = lister(engine, participant_sink_id(sink_id, name))
    assert left == [], f"participant {name}: prepared transactions left: {left}"


@contextlib.contextmanager
def _redis_participant(url: str, options: dict[str, str], readers: dict[str, Callable[[], list[int]]],
                       checks: list[Callable[[str], None]]) -> Iterator[None]:
    tag = f"kit{_uid()}"
    t = "{{" + tag + "}}"
    mapping = json.dumps([{"op": "INCRBY", "key": f"{t}:total", "by": 1},
                          {"op": "XADD", "key": f"{t}:events", "columns": ["id"]}])
    own = {"url": url, "mapping": mapping, "hashTag": tag}
    options |= {"events.format": "twopc-redis", "events.columns": "id", **{f"events.{k}": v for k, v in own.items()}}
    client = redis.Redis.from_url(url, decode_responses=True)
    keys = "{" + tag + "}"

    def read_ids() -> list[int]:
        entries: list[tuple[str, dict[str, str]]] = list(client.xrange(f"{keys}:events") or [])  # type: ignore[arg-type]  # decode_responses: str
        return [int(f["id"]) for _i, f in entries]

    def check(sink_id: str) -> None:
        mine = RedisSink.from_options(own).keys_for(participant_sink_id(sink_id, "events"))
        assert client.zcard(mine.txns) == 0 and client.hlen(mine.prepared) == 0, "Redis transactions left registered"
        staged = list(client.scan_iter(match=mine.staging_prefix + "*", count=1000))
        assert not staged, f"Redis staging left: {staged[:5]}"
        total = int(client.get(f"{keys}:total") or 0)
        assert total == len(read_ids()), f"Redis counter {total} != {len(read_ids())} stream entries"

    readers["events"] = read_ids
    checks.append(check)
    try:
        yield
    finally:
        client.close()
