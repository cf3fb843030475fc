"""What the benchmarks share: the bench table, its generated rows, and how a result is judged
(:mod:`twopc.recovery.demos.bench`, :mod:`twopc.recovery.demos.bench_scaling`,
:mod:`twopc.recovery.demos.bench_stream`)."""

from __future__ import annotations

import compileall
from pathlib import Path

JDBC_JAR = "/usr/share/java/postgresql.jar"
#: the generated rows, as Spark SQL expressions over ``spark.range``
ROW_EXPRS = ("id", "concat('payload-', id) AS payload", "cast(id AS double) * 0.5 AS amount",
             "timestamp_seconds(1767225600 + id) AS ts")
TABLE_COLUMNS = "id bigint NOT NULL, payload text, amount double precision, ts timestamptz"
COLUMN_NAMES = "id, payload, amount, ts"


def create_table(url: str, table: str) -> None:
    """(Re)create a bench table: no primary key, like Spark's JDBC writer would create."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP TABLE IF EXISTS "{table}"'))
            conn.execute(sa.text(f'CREATE TABLE "{table}" ({TABLE_COLUMNS})'))
    finally:
        engine.dispose()


def count_rows(url: str, table: str) -> int:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            return int(c.execute(sa.text(f'SELECT count(*) FROM "{table}"')).scalar_one())
    finally:
        engine.dispose()


def jdbc_target(url: str) -> tuple[str, dict[str, str]]:
    import sqlalchemy as sa

    u = sa.make_url(url)
    return f"jdbc:postgresql://{u.host}:{u.port}/{u.database}", {"user": u.username or "", "password": u.password or ""}


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def compile_package() -> None:
    """Compile twopc's modules to bytecode, as installing the package does, so that a
    benchmark's fresh processes load them as a user's do (a checkout run with
    ``PYTHONDONTWRITEBYTECODE`` set would compile every module again in every process).
    The sub-packages are compiled at their real paths: compileall does not follow links."""
    import twopc

    root = Path(twopc.__file__).parent
    for folder in [root, *(p.resolve() for p in root.iterdir() if p.is_dir() and p.is_symlink())]:
        compileall.compile_dir(str(folder), quiet=1)
