"""What the benchmarks share: the bench table and its rows, how a result is judged, the PostgreSQL
and SparkSession a bench runs on, and what it reads of a process in ``/proc``."""

from __future__ import annotations

import argparse
import compileall
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

JDBC_JAR = "/usr/share/java/postgresql.jar"
#: the generated rows, as Spark SQL expressions over ``spark.range``
ROW_EXPRS = ("id", "concat('payload-', id) AS payload", "cast(id AS double) * 0.5 AS amount",
             "timestamp_seconds(1767225600 + id) AS ts")
TABLE_COLUMNS = "id bigint NOT NULL, payload text, amount double precision, ts timestamptz"
COLUMN_NAMES = "id, payload, amount, ts"


def run_sql(url: str, *statements: str) -> None:
    """Run *statements* in one transaction on the database of SQLAlchemy URL *url*."""
    import sqlalchemy as sa
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def create_table(url: str, table: str, columns: str = TABLE_COLUMNS) -> None:
    """(Re)create *table* with *columns*; a bench table's have no primary key, like the table
    Spark's JDBC writer would create."""
    run_sql(url, f'DROP TABLE IF EXISTS "{table}"', f'CREATE TABLE "{table}" ({columns})')


def count_rows(url: str, table: str, select: str = "count(*)") -> tuple[int, ...]:
    """*select* (counts) over *table* of the database of SQLAlchemy URL *url*."""
    import sqlalchemy as sa
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            return tuple(int(n) for n in c.exec_driver_sql(f'SELECT {select} FROM "{table}"').one())
    finally:
        engine.dispose()


def libpq_dsn(url: str) -> str:
    """The psycopg connection string of SQLAlchemy URL *url* (password included)."""
    import sqlalchemy as sa
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def copy_rows(conn: Any, table: str, rows: int) -> None:
    """COPY *rows* small rows into bench *table* in psycopg connection *conn*'s open transaction."""
    with conn.cursor() as cur, cur.copy(f'COPY "{table}" ({COLUMN_NAMES}) FROM STDIN') as cp:
        for i in range(rows):
            cp.write_row((i, "x", 0.5, "2026-01-01 00:00:00+00"))


def commit_each(conns: Iterable[Any]) -> None:
    for conn in conns:
        conn.commit()


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def jdbc_options(url: str) -> dict[str, str]:
    """The ``url``, ``user`` and ``password`` options of a JDBC writer (Spark's, twopc's) for SQLAlchemy URL *url*."""
    import sqlalchemy as sa
    u = sa.make_url(url)
    return {"url": f"jdbc:postgresql://{u.host}:{u.port}/{u.database}", "user": u.username or "",
            "password": u.password or ""}


def append(df: DataFrame, fmt: str, table: str, jdbc: Mapping[str, str], **options: str) -> None:
    """Append *df* to PostgreSQL *table* through Spark format *fmt* (Spark's ``jdbc`` told the driver class),
    connected by *jdbc* (:func:`jdbc_options`), with *options* (a ``url`` among them replaces *jdbc*'s)."""
    w = df.write.format(fmt).mode("append").options(**jdbc).option("dbtable", table)
    if fmt == "jdbc":
        w = w.option("driver", "org.postgresql.Driver")
    w.options(**options).save()


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def compile_package() -> None:
    """Compile twopc to bytecode as installing does, so a bench's fresh processes load it as a user's
    do; sub-packages at their real paths (compileall does not follow links)."""
    import twopc
    root = Path(twopc.__file__).parent
    for folder in [root, *(p.resolve() for p in root.iterdir() if p.is_dir() and p.is_symlink())]:
        compileall.compile_dir(str(folder), quiet=1)


def module_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The command line of ``python -m twopc.recovery.demos.<module>``, described by *doc*'s first paragraph."""
    return argparse.ArgumentParser(prog=f"python -m twopc.recovery.demos.{module}",
                                   description=(doc or "").split("\n\n")[0])


def key_value(text: str) -> tuple[str, str]:
    """A ``KEY=VALUE`` argument as a pair (an argparse ``type``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def bench_main_setup() -> None:
    """What a bench's ``main`` does first: SIGTERM cleans up as Ctrl-C does; Spark's workers run this interpreter."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@contextlib.contextmanager
def server_url(url: str | None, server: Callable[[], Any]) -> Iterator[str]:
    """*url*, or the URL of the throwaway server *server* makes, running while the block does."""
    if url:
        yield url
        return
    with server() as started:
        yield started.url


def bench_session(app_name: str, extra: Iterable[tuple[str, str]] = (), master: str = "local[2]",
                  **conf: str) -> SparkSession:
    """A *master* session in UTC without UI, logging errors only, twopc's sinks registered, with
    *conf* (``spark.`` keys, dots as underscores) and *extra* (whole keys)."""
    from pyspark.sql import SparkSession

    from twopc import sinks
    settings: dict[str, Any] = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                                "spark.sql.session.timeZone": "UTC"}
    settings.update({"spark." + key.replace("_", "."): value for key, value in conf.items()}, **dict(extra))
    spark = SparkSession.builder.master(master).appName(app_name).config(map=settings).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sinks.register_all(spark)
    return spark


def jvm_pid(spark: SparkSession) -> int:
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]  # py4j


def proc_status(pid: int | str) -> dict[bytes, bytes]:
    """The fields of ``/proc/<pid>/status`` (``VmRSS``, ``PPid``...); empty when the process is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            return dict(line.split(b":", 1) for line in f if b":" in line)
    except OSError:
        return {}


def rss_kib(status: dict[bytes, bytes]) -> int:
    """The resident set size in a :func:`proc_status`, KiB (0 when it has none)."""
    rss = status.get(b"VmRSS", b"0 kB").split()
    return int(rss[0]) if rss else 0


def processes() -> Iterator[tuple[str, list[bytes]]]:
    """Every process's pid and command line (its arguments), as ``/proc`` shows them now."""
    for name in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError), open(f"/proc/{name}/cmdline", "rb") as f:
            yield name, f.read().split(b"\0")
