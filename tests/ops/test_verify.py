"""``twopc verify``, as an operator runs it (the console script, secrets from the environment),
against real PostgreSQL and Redis: a Redis Stream → PostgreSQL pipeline's table and a batch
write's table, clean and with a planted duplicate, loss and stranger row; and a 1M-entry range
in bounded memory."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from twopc import CommitCoordinator, CommitLedger
from twopc._target import open_target_ledger
from twopc.sinks import PostgresSink

from tests._ops_helpers import REPO, cli_env, twopc_cli
from tests._sql_helpers import batch, ctx, prepare, uid, validated

# ids with 1 to 3 digit sequence numbers over several milliseconds: their text order is not
# their order as entry ids ("5-10" < "5-9")
_IDS = [f"{ms}-{seq}" for ms in range(1700000000000, 1700000000012) for seq in range(1, 151)]


def _pg(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False),
                           autocommit=True)


def _copy_rows(pg: psycopg.Connection[Any], table: str, rows: Iterator[tuple[str, str, int]]) -> None:
    with pg.cursor().copy(f"COPY {table} (stream, id, amount) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


@pytest.fixture
def pipeline(postgres_url: str, redis_url: str, r: Any, prefix: str) -> Iterator[dict[str, Any]]:
    """A stream of :data:`_IDS` read up to its end by group ``g``, and a table holding exactly
    the rows the Redis Stream → PostgreSQL pipeline writes for it (``stream``, ``id``, a field)."""
    stream, table = f"{prefix}:orders", f"v_{uid()}"
    pipe = r.pipeline(transaction=False)
    for i, entry_id in enumerate(_IDS):
        pipe.xadd(stream, {"amount": str(i)}, id=entry_id)
    pipe.xgroup_create(stream, "g", id=_IDS[-1])
    pipe.execute()
    with _pg(postgres_url) as pg:
        pg.execute(f"CREATE TABLE {table} (stream text, id text, amount bigint, \"timestamp\" timestamptz)")
        _copy_rows(pg, table, ((stream, e, i) for i, e in enumerate(_IDS)))
        yield {"stream": stream, "table": table, "pg": pg, "url": postgres_url, "redis": redis_url}
        pg.execute(f"DROP TABLE {table}")
    r.delete(stream)


def _verify_stream(p: dict[str, Any], *extra: str, page: int = 300) -> subprocess.CompletedProcess[str]:
    return twopc_cli("verify", "--format", "twopc-postgres", "--stream", p["stream"], "--redis", p["redis"],
                     "--page-size", str(page), "--json", *extra, options={"url": p["url"], "dbtable": p["table"]})


def _report(out: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert out.returncode in (0, 1, 3), out.stderr
    assert out.stdout.startswith("{"), out.stderr
    return dict(json.loads(out.stdout))


def test_a_clean_pipeline_is_clean(pipeline: dict[str, Any]) -> None:
    out = _verify_stream(pipeline, "--group", "g")
    report = _report(out)
    assert out.returncode == 0, out.stdout
    assert (report["expected"], report["found"], report["lost"], report["duplicated"], report["unexpected"]) == \
        (len(_IDS), len(_IDS), 0, 0, 0)
    assert "verify: 300 entries checked" in out.stderr  # progress, one line per page


def test_a_planted_duplicate_loss_and_stranger_are_found_each(pipeline: dict[str, Any]) -> None:
    pg, table, stream = pipeline["pg"], pipeline["table"], pipeline["stream"]
    # at page edges (page 300: entries 300 and 301), and one in the middle
    dup, gone, stranger = _IDS[299], _IDS[300], "1700000000005-999"
    pg.execute(f"INSERT INTO {table} (stream, id, amount) VALUES (%s, %s, 0)", (stream, dup))
    report = _report(_verify_stream(pipeline, "--group", "g"))
    assert (report["verdict"], report["duplicated"], report["extra_rows"], report["lost"], report["unexpected"]) \
        == ("discrepancies", 1, 1, 0, 0)
    assert report["examples"]["duplicated"] == [dup]
    pg.execute(f"DELETE FROM {table} WHERE stream = %s AND id = %s AND amount = 0", (stream, dup))
    pg.execute(f"DELETE FROM {table} WHERE stream = %s AND id = %s", (stream, gone))
    report = _report(_verify_stream(pipeline, "--group", "g"))
    assert (report["verdict"], report["lost"], report["duplicated"], report["unexpected"]) == \
        ("discrepancies", 1, 0, 0)
    assert report["examples"]["lost"] == [gone]
    pg.execute(f"INSERT INTO {table} (stream, id, amount) VALUES (%s, %s, 0)", (stream, gone))
    pg.execute(f"INSERT INTO {table} (stream, id, amount) VALUES (%s, %s, 0)", (stream, stranger))
    out = _verify_stream(pipeline, "--group", "g")
    report = _report(out)
    assert out.returncode == 1
    assert (report["lost"], report["duplicated"], report["unexpected"], report["found"]) == (0, 0, 1, len(_IDS) + 1)
    assert report["examples"]["unexpected"] == [stranger]


def test_rows_after_the_groups_position_and_of_other_streams_are_not_judged(pipeline: dict[str, Any],
                                                                             r: Any) -> None:
    pg, table, stream = pipeline["pg"], pipeline["table"], pipeline["stream"]
    r.xgroup_setid(stream, "g", _IDS[999])  # committed further than the group moved: not a discrepancy
    pg.execute(f"INSERT INTO {table} (stream, id, amount) VALUES ('other', %s, 0)", (_IDS[0],))
    out = _verify_stream(pipeline, "--group", "g")
    report = _report(out)
    assert out.returncode == 0, out.stdout
    assert report["expected"] == 1000 and report["not_checked"] == {"after the range": len(_IDS) - 1000}
    text = twopc_cli("verify", "--format", "twopc-postgres", "--stream", stream, "--redis", pipeline["redis"],
                     "--from", _IDS[10], "--to", _IDS[20],
                     options={"url": pipeline["url"], "dbtable": pipeline["table"]})
    assert text.returncode == 0 and re.search(r"expected +11\n", text.stdout) and "verdict: CLEAN" in text.stdout


def test_a_missing_group_or_stream_cannot_tell_and_a_missing_table_is_an_error(pipeline: dict[str, Any]) -> None:
    out = _verify_stream(pipeline, "--group", "nope")
    assert out.returncode == 3 and "has no group 'nope' (its groups: g)" in out.stdout
    gone = dict(pipeline, stream=pipeline["stream"] + "x")
    assert _verify_stream(gone).returncode == 3
    out = twopc_cli("verify", "--format", "twopc-postgres", "--stream", pipeline["stream"], "--redis",
                    pipeline["redis"], options={"url": pipeline["url"], "dbtable": "no_such_table"})
    assert out.returncode == 2 and "no_such_table" in out.stderr and "Traceback" not in out.stderr


def test_unexpected_rows_where_entries_were_deleted_cannot_tell(pipeline: dict[str, Any], r: Any) -> None:
    r.xdel(pipeline["stream"], _IDS[500])  # its row stays: deleted after the pipeline wrote it, or planted?
    out = _verify_stream(pipeline, "--group", "g")
    report = _report(out)
    assert out.returncode == 3 and (report["unexpected"], report["lost"]) == (1, 0)
    assert report["examples"]["unexpected"] == [_IDS[500]] and "removed from the stream" in report["cannot_tell"][0]
    pipeline["pg"].execute(f"DELETE FROM {pipeline['table']} WHERE id = %s", (_IDS[501],))  # a loss is certain
    assert _verify_stream(pipeline, "--group", "g").returncode == 1


# -- a batch write with a checkpoint ------------------------------------------------------------


@pytest.fixture
def batch_write(postgres_url: str, pg_engine: sa.Engine, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Two committed batches of twopc-postgres (3 tasks, 30 rows each) in a checkpoint's ledger."""
    table, sink_id = f"b_{uid()}", f"s_{uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint, s text, x double precision)")
    sink = validated(PostgresSink, postgres_url, table)
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_sink_id(None, default=sink_id)
    for b in (0, 1):
        handles = [prepare(sink, ctx(sink_id, b, p, 0), batch(list(range(b * 100 + p * 10, b * 100 + p * 10 + 10))))
                   for p in range(3)]
        CommitCoordinator(sink, ledger, sink_id).commit_batch(b, handles)
    sink.close()
    yield {"table": table, "checkpoint": str(tmp_path / "ck"), "url": postgres_url, "engine": pg_engine}
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"DROP TABLE {table}")


def _verify_batch(w: dict[str, Any], *extra: str) -> tuple[int, dict[str, Any]]:
    out = twopc_cli("verify", w["checkpoint"], "--format", "twopc-postgres", "--json", *extra,
                    options={"url": w["url"], "dbtable": w["table"]})
    return out.returncode, _report(out)


def test_a_batch_write_is_clean_then_each_planted_row_is_found(batch_write: dict[str, Any]) -> None:
    w, engine = batch_write, batch_write["engine"]
    code, report = _verify_batch(w, "--key", "id")
    assert code == 0, report
    assert (report["expected"], report["found"]) == (60, 60)

    def run(statement: str) -> None:
        with engine.begin() as c:
            c.exec_driver_sql(statement)

    run(f"INSERT INTO {w['table']} SELECT * FROM {w['table']} WHERE id = 105")  # a duplicate
    code, report = _verify_batch(w, "--key", "id")
    assert (code, report["duplicated"], report["extra_rows"], report["lost"], report["unexpected"]) == (1, 1, 1, 0, 0)
    assert report["examples"]["duplicated"] == ["105"]
    code, report = _verify_batch(w)  # without a key: one row more than the ledger records
    assert (code, report["unexpected"], report["found"]) == (1, 1, 61)
    run(f"DELETE FROM {w['table']} WHERE id = 105")  # both copies: a loss
    code, report = _verify_batch(w, "--key", "id")
    assert (code, report["lost"], report["duplicated"], report["unexpected"]) == (1, 1, 0, 0)
    run(f"INSERT INTO {w['table']} VALUES (105, 'v105', 52.5), (9999, 'x', 0)")  # a stranger
    code, report = _verify_batch(w, "--key", "id")
    assert (code, report["unexpected"], report["lost"], report["duplicated"]) == (1, 1, 0, 0)


def test_a_batch_checkpoint_of_another_sink_id_cannot_tell(batch_write: dict[str, Any], tmp_path: Path) -> None:
    out = twopc_cli("verify", batch_write["checkpoint"], "--format", "twopc-postgres", "--sink-id", "other",
                    options={"url": batch_write["url"], "dbtable": batch_write["table"]})
    assert out.returncode == 3 and "belongs to sink id" in out.stderr
    out = twopc_cli("verify", str(tmp_path / "nothing"), "--format", "twopc-postgres",
                    options={"url": batch_write["url"], "dbtable": batch_write["table"]})
    assert out.returncode == 3


# -- a 1M-entry range in bounded memory ----------------------------------------------------------

_MILLION = 1_000_000
# XADD of entries <ms>-1 .. <ms>-n, server-side (one call per chunk keeps each block short)
_LOAD = """
for i = tonumber(ARGV[2]), tonumber(ARGV[3]) do
  redis.call('XADD', KEYS[1], ARGV[1] .. '-' .. i, 'a', i)
end
return 1
"""


_MEASURE = """
import json, resource, subprocess, sys
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps({"rc": proc.returncode, "kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                  "out": proc.stdout, "err": proc.stderr[-2000:]}))
"""


def _measured(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run *argv* under a fresh interpreter and return its exit code, output and peak RSS (KiB)."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=900)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


# what a check that pulls the range's ids into Python holds: every stream id and every row's
_NAIVE = """
import os, sys, psycopg, redis
r = redis.Redis.from_url(os.environ["V_REDIS"])
ids, cursor = set(), "-"
while True:
    got = r.xrange(sys.argv[1], cursor, "+", count=10000)
    ids.update(e[0].decode() for e in got)
    if len(got) < 10000:
        break
    cursor = "(" + got[-1][0].decode()
with psycopg.connect(os.environ["V_PG"]) as pg:
    rows = pg.execute(f"SELECT id FROM {sys.argv[2]} WHERE stream = %s", (sys.argv[1],)).fetchall()
found = {i for (i,) in rows}
print(len(ids), len(ids - found), len(found - ids))
"""


def test_a_million_entries_verify_in_bounded_memory(postgres_url: str, redis_url: str, r: Any,
                                                    prefix: str) -> None:
    stream, table, ms = f"{prefix}:big", f"m_{uid()}", 1700000000000
    for lo in range(1, _MILLION + 1, 100_000):
        r.eval(_LOAD, 1, stream, str(ms), str(lo), str(lo + 99_999))
    r.xgroup_create(stream, "g", id=f"{ms}-{_MILLION}")
    try:
        with _pg(postgres_url) as pg:
            pg.execute(f"CREATE TABLE {table} (stream text, id text, amount bigint)")
            _copy_rows(pg, table, ((stream, f"{ms}-{i}", i) for i in range(1, _MILLION + 1)))
            pg.execute(f"INSERT INTO {table} VALUES (%s, %s, 0)", (stream, f"{ms}-777777"))  # one duplicate
            pg.execute(f"ANALYZE {table}")
        script = shutil.which("twopc", path=os.path.dirname(sys.executable))
        assert script is not None
        env = cli_env({"V_PG": sa.make_url(postgres_url).set(drivername="postgresql").render_as_string(
            hide_password=False), "V_REDIS": redis_url, "V_URL": postgres_url})
        verify = _measured([script, "verify", "--format", "twopc-postgres", "--stream", stream, "--redis", redis_url,
                            "--group", "g", "--json", "--option-env", "url=V_URL", "--option", f"dbtable={table}"],
                           env)
        assert verify["rc"] == 1, verify["err"]
        report = json.loads(verify["out"])
        assert (report["expected"], report["found"], report["duplicated"], report["lost"], report["unexpected"]) \
            == (_MILLION, _MILLION + 1, 1, 0, 0)
        assert report["examples"]["duplicated"] == [f"{ms}-777777"]
        # the fixed cost: the same command on a range of one entry; and a check that pulls the ids into Python
        one = _measured([script, "verify", "--format", "twopc-postgres", "--stream", stream, "--redis", redis_url,
                         "--to", f"{ms}-1", "--json", "--option-env", "url=V_URL", "--option", f"dbtable={table}"],
                        env)
        assert one["rc"] == 0 and json.loads(one["out"])["expected"] == 1, one
        idle = _measured([script, "verify", "--help"], env)
        naive = _measured([sys.executable, "-c", "import twopc, sinks, recovery, psycopg\n" + _NAIVE, stream, table],
                          env)
        assert naive["out"].split() == [str(_MILLION), "0", "0"], naive["err"]
        grew, naive_grew = verify["kib"] - one["kib"], naive["kib"] - idle["kib"]
        bound = 48 * 1024  # KiB: one page of 50k ids measured about 20 MB
        assert naive_grew > bound, (naive_grew, bound)  # pulling the ids into Python breaks the bound
        assert grew < bound, (grew, bound, verify["kib"], one["kib"])
    finally:
        r.delete(stream)
        with _pg(postgres_url) as pg:
            pg.execute(f"DROP TABLE IF EXISTS {table}")



def test_a_txnappid_write_whose_ledger_is_in_the_target(postgres_url: str, pg_engine: sa.Engine) -> None:
    table, sink_id = f"a_{uid()}", f"app_{uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint, s text, x double precision)")
    sink = validated(PostgresSink, postgres_url, table)
    backend = sink.target_ledger()
    lease = backend.acquire(sink_id)
    try:
        ledger = open_target_ledger(backend, sink_id, lease=lease)
        ledger.bind_sink_id(sink_id, sink_id)
        ledger.claim()
        handles = [prepare(sink, ctx(sink_id, 20261122, p, 0), batch(list(range(p * 10, p * 10 + 10))))
                   for p in range(2)]
        CommitCoordinator(sink, ledger, sink_id).commit_batch(20261122, handles)
    finally:
        backend.release(lease)
        sink.close()
    options = {"url": postgres_url, "dbtable": table}
    out = twopc_cli("verify", "--format", "twopc-postgres", "--sink-id", sink_id, "--key", "id", "--json",
                    options=options)
    assert out.returncode == 0 and _report(out)["expected"] == 20, out.stdout + out.stderr
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"INSERT INTO {table} VALUES (77, 'x', 0)")
    out = twopc_cli("verify", "--format", "twopc-postgres", "--sink-id", sink_id, "--json", options=options)
    assert out.returncode == 1 and _report(out)["unexpected"] == 1
    out = twopc_cli("verify", "--format", "twopc-postgres", "--sink-id", "nobody", options=options)
    assert out.returncode == 3 and "records no write of sink id 'nobody'" in out.stdout
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"DROP TABLE {table}")
