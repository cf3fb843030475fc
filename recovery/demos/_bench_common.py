"""What the benchmarks share: the bench table, its generated rows, and how a result is judged
(:mod:`twopc.recovery.demos.bench`, :mod:`twopc.recovery.demos.bench_scaling`, :mod:`twopc.recovery.demos.bench_stream`)."""

from __future__ import annotations

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
