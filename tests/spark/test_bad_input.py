"""Bad input and configuration, through Spark, against the real servers.

Each entry of :data:`tests._bad_input_cases.CASES` is one class of bad input. Every case
runs through the shared Spark session as a user would write it, logged in with a
password holding every URL-special character, and asserts:

(a) the failure (or the success) the user expects;
(b) that the first twopc line of the error names the problem and the fix;
(c) that nothing is left behind: target rows, prepared transactions (PostgreSQL and
    MariaDB), staged rows, Redis keys under the case's hash tag, written files, and
    half-written ledger records;
(d) that no piece of the password is in the exception, the console output of the driver
    and of the Python workers, the driver's log records, or the checkpoint;
and at the end, that it is in none of the servers' statement logs (PostgreSQL
``log_statement=all``, the MariaDB general log, Redis ``MONITOR``). The canary test
puts the password in each of those places and checks that each scan finds it.

Issue 13's items 1-4 (non-transactional tables, a zombie task, a checkpoint reused for
another target, two writers with one sink id) add their classes as entries here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa

import twopc
import twopc.spi
from twopc import sinks

from tests._bad_input_cases import CASES, Case, Run
from tests._bad_input_env import Logins, Secret, StatementLogs, checkpoint_problems, checkpoint_text, uid

# twopc's exception tree: the bases a caller catches (twopc) and the finer ones (twopc.spi)
_TWOPC_ERRORS = "|".join(n for n in (*twopc.__all__, *twopc.spi.__all__) if n.endswith("Error"))
_FIRST_LINE = re.compile(rf"(?:twopc\._errors\.|sinks\.\S+\.)?\b({_TWOPC_ERRORS})\b: (.+)")


@pytest.fixture(scope="module")
def env(spark: Any, postgres_url: str, postgres_server: Any, mariadb_server: Any, redis_url: str) -> Iterator[Logins]:
    sinks.register_all(spark)
    if postgres_server is None or mariadb_server is None:
        pytest.fail("the bad-input suite creates logins and reads the statement logs, so it needs the servers the "
                    "tests start themselves (unset TWOPC_TEST_POSTGRES_URL and TWOPC_TEST_MARIADB_URL)", pytrace=False)
    u = sa.make_url(postgres_url)
    pg_admin = f"postgresql+psycopg://postgres@/{u.database}?host={postgres_server.admin_dsn.split()[0][5:]}&port={u.port}"
    logins = Logins(Secret(), pg_admin, mariadb_server.admin_url, redis_url, pg_tcp=postgres_url)
    logins.create()
    logs = StatementLogs(pg_admin, postgres_server.log_path, mariadb_server.admin_url, redis_url)
    logs.start()
    logins.logs = logs  # type: ignore[attr-defined]  # the last tests read them
    try:
        yield logins
    finally:
        logs.stop()
        logins.drop()


def first_twopc_line(exc: BaseException) -> str:
    """The first line of *exc* (as Spark reports it) that is a twopc error's message."""
    for line in str(exc).splitlines():
        m = _FIRST_LINE.search(line)
        if m:
            return f"{m.group(1)}: {m.group(2)}"
    return ""


def _run(spark: Any, case: Case, run: Run) -> None:
    df = eval(case.rows, {"spark": spark})
    opts = case.options(run)
    if case.fmt == "twopc-redis-stream":
        spark.readStream.format(case.fmt).options(**opts).load()
        return
    df.write.format(case.fmt).mode("append").options(**opts).save()


def _left_behind(case: Case, run: Run, admin: dict[str, str]) -> list[str]:
    out = [*checkpoint_problems(run.ck)]
    if case.server in ("postgres", "mariadb", "sqlite"):
        eng = run.engine(case.server)
        try:
            with eng.connect() as c:
                insp = sa.inspect(c)
                tables = insp.get_table_names()
                if run.table in tables:
                    n = c.exec_driver_sql(f"SELECT count(*) FROM {run.table}").scalar_one()
                    if n != case.written + case.kept:
                        out.append(f"{n} rows in {run.table}, expected {case.written + case.kept}")
                for t in tables:
                    if t.startswith("twopc_stage") or t == f"{run.table}_dead":
                        n = c.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar_one()
                        if n:
                            out.append(f"{n} staged rows in {t}")
        finally:
            eng.dispose()
    if case.server == "sqlite":
        if (run.sqlite.parent / "missing").exists():
            out.append("the missing folder of the SQLite path was created")
        notes = run.sqlite.parent / "notes.txt"
        if notes.exists() and not notes.read_text().startswith("these are notes"):
            out.append("the file that is not a database was written")
    if case.server == "postgres":
        eng = sa.create_engine(admin["postgres"])
        with eng.connect() as c:
            n = c.execute(sa.text("SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE :p"),
                          {"p": f"%{run.sink}%"}).scalar_one()
        eng.dispose()
        if n:
            out.append(f"{n} prepared transactions of {run.sink}")
    if case.server == "mariadb":
        eng = sa.create_engine(admin["mariadb"])
        with eng.connect() as c:
            xids = [str(r) for r in c.exec_driver_sql("XA RECOVER").fetchall()]
        eng.dispose()
        if any(run.sink in x for x in xids):
            out.append(f"XA transactions of {run.sink} prepared")
    if case.server in ("redis", "stream"):
        r = redis.Redis.from_url(admin["redis"])
        keys = r.keys(f"*{run.tag}*")
        r.close()
        if len(keys) != case.written:
            out.append(f"Redis keys under {run.tag}: {keys[:5]}")
    if case.server == "file" and run.out.exists():
        files = [p for p in run.out.rglob("*") if p.is_file()]
        if files:
            out.append(f"files written: {files[:5]}")
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name.replace(" ", "-") for c in CASES])
def test_bad_input(case: Case, env: Logins, spark: Any, tmp_path: Path, console: Callable[[], str],
                   caplog: pytest.LogCaptureFixture, postgres_url: str, mariadb_url: str, redis_url: str) -> None:
    caplog.set_level("INFO")
    run = Run(env, f"bad_{uid()}", f"bad{uid()}", f"bad{uid()}", tmp_path / "ck", tmp_path / "out",
              tmp_path / "lite.db")
    if case.setup:
        case.setup(run)
    error: BaseException | None = None
    try:
        _run(spark, case, run)
    except Exception as exc:  # noqa: BLE001 - Spark wraps the twopc error in its own exceptions
        error = exc
    # (a) and (b)
    if case.expect:
        assert error is not None, f"{case.name}: the write succeeded"
        line = first_twopc_line(error)
        assert line, f"{case.name}: no twopc error in {str(error)[:2000]}"
        for needle in case.expect:
            assert needle.lower() in line.lower(), f"{case.name}: {needle!r} not in the first twopc line: {line}"
    else:
        assert error is None, f"{case.name}: {error}"
    # (c)
    leftovers = _left_behind(case, run, {"postgres": postgres_url, "mariadb": mariadb_url, "redis": redis_url})
    assert not leftovers, f"{case.name}: {leftovers}"
    # (d)
    places = {"exception": str(error or ""), "console": console(), "log": caplog.text,
              **dict(checkpoint_text(run.ck))}
    for where, text in places.items():
        assert not env.secret.found_in(text), f"{case.name}: a piece of the password in {where}"


def test_the_scans_find_a_secret(env: Logins, spark: Any, tmp_path: Path, console: Callable[[], str],
                                 caplog: pytest.LogCaptureFixture, postgres_url: str, mariadb_url: str,
                                 redis_url: str) -> None:
    """The canary: a password of the same shape, put in each place the cases scan, is found
    there by the same scan (so a scan that reads nothing cannot pass)."""
    canary = Secret()
    token = canary.head

    def leak(_rows: Any) -> Iterator[Any]:
        import sys

        print(f"worker says {token}", file=sys.stderr, flush=True)
        yield from ()

    spark.range(1).rdd.mapPartitions(leak).count()
    import logging

    logging.getLogger("twopc.canary").warning("driver log says %s", token)
    print(f"driver says {token}", flush=True)
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "record").write_text(token)
    text = console()
    assert canary.found_in(text.replace(f"driver says {token}", "")), "the scan of the workers' output finds nothing"
    assert canary.found_in(text), "the scan of the driver's output finds nothing"
    assert canary.found_in(caplog.text)
    assert canary.found_in("".join(t for _, t in checkpoint_text(tmp_path / "ck")))
    for url, sql in ((postgres_url, f"SELECT '{token}'"), (mariadb_url, f"SELECT '{token}'")):
        eng = sa.create_engine(url)
        with eng.connect() as c:
            c.exec_driver_sql(sql)
        eng.dispose()
    r = redis.Redis.from_url(redis_url)
    r.echo(token)
    r.close()
    logs = env.logs.text()  # type: ignore[attr-defined]  # set by the env fixture
    for name, text in logs.items():
        assert canary.found_in(text), f"the scan of the {name} finds nothing"


def test_no_secret_in_the_servers_statement_logs(env: Logins) -> None:
    """After every case (this test runs last): no piece of the password in any server's
    statement log."""
    logs = env.logs.text()  # type: ignore[attr-defined]  # set by the env fixture
    for name, text in logs.items():
        assert not env.secret.found_in(text), f"a piece of the password in the {name}"
