"""One set of type rules for every commit mode: a matrix of Spark types x
target column types, written through the staging mode and the prepared mode (PostgreSQL
prepared transactions, MariaDB XA) on real servers, and on PostgreSQL also through Spark's own
``format("jdbc")`` writer (the PostgreSQL JDBC driver jar, added to the shared session).

The property: a DataFrame one twopc mode accepts, the other accepts too, and both store the
same values. Against Spark's writer, the cells where twopc decides otherwise are exactly the
exceptions listed here and in the README's type table.

The Arrow batches are the ones Spark hands the writer (``DataFrame.toArrow()``); the modes
are driven through the sink API, the way the Spark runtime drives them on the executors.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import sqlalchemy as sa

from twopc.sinks import MySqlXaSink, PostgresSink, StagingSink

from tests._sql_helpers import uid, write_one_task

JDBC_JAR = "/usr/share/java/postgresql.jar"

#: Spark type -> SQL that makes a DataFrame ``(id bigint, v <type>)`` of two values and a null
SPARK_VALUES: dict[str, str] = {
    "int": "CAST(x AS INT)", "float": "CAST(x + 0.5 AS FLOAT)", "double": "CAST(x + 0.5 AS DOUBLE)",
    "decimal(22,1)": "CAST(x + 0.5 AS DECIMAL(22,1))", "boolean": "x > 0",
    "string": """CASE WHEN x > 0 THEN '{"k": 1}' ELSE '[]' END""", "binary": "CAST(CAST(x AS STRING) AS BINARY)",
    "date": "DATE_ADD(DATE'2020-01-02', x)",
    "timestamp": "TIMESTAMP'2020-01-02 03:04:05.123456' + MAKE_INTERVAL(0, 0, 0, x)",
    "timestamp_ntz": "TIMESTAMP_NTZ'2020-01-02 03:04:05.123456' + MAKE_INTERVAL(0, 0, 0, x)",
    "map<string,string>": "MAP('k', CAST(x AS STRING))",
}

PG_COLUMNS = ("smallint", "bigint", "real", "double precision", "numeric(30,4)", "boolean", "text", "jsonb",
              "bytea", "date", "timestamp", "timestamptz")
MY_COLUMNS = ("tinyint", "int", "bigint", "float", "double", "decimal(30,4)", "varchar(40)", "text", "json",
              "varbinary(40)", "date", "datetime(6)", "timestamp(6)")

#: (Spark type, PostgreSQL column) cells that Spark's writer accepts and twopc refuses: the
#: server would store the value's text (int4 -> text is an assignment cast in PostgreSQL);
#: twopc asks for an explicit cast (e.g. ``F.col("v").cast("string")``) instead of guessing it.
REFUSED_BUT_SPARK_WRITES = {
    *(("int", "text"), ("float", "text"), ("double", "text"), ("decimal(22,1)", "text"), ("boolean", "text"),
      ("binary", "text"), ("date", "text"), ("timestamp", "text"), ("timestamp_ntz", "text")),
    ("timestamp", "date"), ("timestamp_ntz", "date"),
    # pgjdbc sends timestamps as untyped text, which bytea's input takes as its bytes
    ("timestamp", "bytea"), ("timestamp_ntz", "bytea"),
}
#: cells twopc writes and Spark's writer refuses: pgjdbc sends strings as varchar, which
#: PostgreSQL does not assign to jsonb (twopc sends text that the column parses); Spark's
#: writer has no JDBC type for a map (twopc writes it as a JSON object)
WRITTEN_BUT_SPARK_REFUSES = {("string", "jsonb"), ("map<string,string>", "jsonb")}


@dataclass(frozen=True)
class Outcome:
    """What one writer did with one cell: the rows it stored (``None``: refused)."""

    rows: tuple[Any, ...] | None
    error: str = ""

    @property
    def accepted(self) -> bool:
        return self.rows is not None


@pytest.fixture(scope="module")
def frames(spark: Any) -> dict[str, Any]:
    """Spark type -> a DataFrame ``(id, v)`` of two values and a null."""
    return {name: spark.sql(f"SELECT CAST(i AS BIGINT) AS id, CASE WHEN i = 2 THEN NULL ELSE {expr} END AS v "
                            f"FROM VALUES (0, 1), (1, -3), (2, 1) AS t(i, x)").coalesce(1)
            for name, expr in SPARK_VALUES.items()}


class Matrix:
    """One wide table per writer, a nullable column per target type (``c0``, ``c1``...); a
    cell writes the DataFrame's ``v`` as its column, under ids of its own."""

    def __init__(self, engine: sa.Engine, columns: tuple[str, ...], writer: str) -> None:
        self.engine, self.columns = engine, columns
        self.table = f"m_{writer}_{uid()}"
        cols = ", ".join(f"c{i} {c}" for i, c in enumerate(columns))
        with engine.begin() as c:
            c.exec_driver_sql(f"CREATE TABLE {self.table} (id BIGINT PRIMARY KEY, {cols})")
        self._next = 0
        self._lock = threading.Lock()

    def run(self, frame: Any, column: str, write: Callable[[Any, str], Any], *, atomic: bool = True) -> Outcome:
        """Write *frame* (a DataFrame or Arrow batch, ``id`` shifted, ``v`` renamed) into
        *column*; the rows stored, or the refusal."""
        col = f"c{self.columns.index(column)}"
        with self._lock:
            base, self._next = self._next, self._next + 100
        if isinstance(frame, pa.RecordBatch):
            ids = pc.add(frame.column(0), base)
            frame = pa.RecordBatch.from_arrays([ids, frame.column(1)], names=["id", col])
        else:
            frame = frame.selectExpr(f"id + {base} AS id", f"v AS {col}")
        try:
            write(frame, self.table)
        except Exception as exc:  # noqa: BLE001 - any refusal is an outcome of the cell
            rows = self._read(col, base)
            assert not atomic or rows == (), "a refused write left rows behind"
            return Outcome(None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
        return Outcome(self._read(col, base))

    def _read(self, col: str, base: int) -> tuple[Any, ...]:
        with self.engine.connect() as c:
            return tuple((i - base, v) for i, v in c.exec_driver_sql(
                f"SELECT id, {col} FROM {self.table} WHERE id >= {base} AND id < {base + 100} ORDER BY id").all())

    def drop(self) -> None:
        with self.engine.begin() as c:
            c.exec_driver_sql(f"DROP TABLE IF EXISTS {self.table}")


def _modes(url: str, prepared: type[Any], engine: sa.Engine, columns: tuple[str, ...],
           frames: dict[str, Any]) -> dict[tuple[str, str], tuple[Outcome, Outcome]]:
    """Every cell through the staging mode and through *prepared*."""
    staging, direct = Matrix(engine, columns, "stg"), Matrix(engine, columns, "prep")
    stages: set[str] = set()

    def stage(batch: pa.RecordBatch, table: str) -> None:
        sink = StagingSink(url, table, staging_table=f"twopc_stage_{batch.schema.names[1]}_{staging.table}")
        stages.add(sink.stage.quoted(engine.dialect))
        write_one_task(sink, batch)

    try:
        return {(name, column): (staging.run(batch, column, stage),
                                 direct.run(batch, column, lambda b, t: write_one_task(prepared(url, t), b)))
                for name, df in frames.items() for batch in [df.toArrow().to_batches()[0]] for column in columns}
    finally:
        staging.drop()
        direct.drop()
        with engine.begin() as c:
            for t in stages:
                c.exec_driver_sql(f"DROP TABLE IF EXISTS {t}")


def _assert_modes_agree(results: dict[tuple[str, str], tuple[Outcome, Outcome]]) -> None:
    bad = [f"{t} -> {c}: staging {s.rows or s.error}; prepared {p.rows or p.error}"
           for (t, c), (s, p) in results.items() if s != p and (s.accepted or p.accepted)]
    assert not bad, "the modes disagree:\n" + "\n".join(bad)
    assert any(s.accepted for s, _ in results.values()) and any(not s.accepted for s, _ in results.values())


@pytest.fixture(scope="module")
def pg_engine(postgres_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(postgres_url)
    yield engine
    engine.dispose()


def _spark_jdbc(postgres_url: str, df: Any, table: str) -> None:
    u = sa.make_url(postgres_url)
    (df.write.format("jdbc").mode("append").option("url", f"jdbc:postgresql://{u.host}:{u.port}/{u.database}")
     .option("dbtable", table).option("user", u.username).option("password", u.password)
     .option("driver", "org.postgresql.Driver").save())


def test_postgres_modes_agree_with_each_other_and_with_spark_s_writer(spark, frames, postgres_url,
                                                                       pg_engine) -> None:
    if not os.path.exists(JDBC_JAR):
        pytest.fail(f"the PostgreSQL JDBC driver is missing at {JDBC_JAR} (Spark's own writer needs it): run "
                    "`make jdbc-driver` (as root it installs Debian's libpostgresql-jdbc-java; `make test` does "
                    "it first), or `sudo apt-get install -y libpostgresql-jdbc-java`")
    spark.sql(f"ADD JAR {JDBC_JAR}")
    results = _modes(postgres_url, PostgresSink, pg_engine, PG_COLUMNS, frames)
    _assert_modes_agree(results)
    jdbc = Matrix(pg_engine, PG_COLUMNS, "jdbc")
    try:
        spark_results = {(name, column): jdbc.run(df, column, lambda d, t: _spark_jdbc(postgres_url, d, t),
                                                  atomic=False)
                         for name, df in frames.items() for column in PG_COLUMNS}
    finally:
        jdbc.drop()
    twopc_only = {k for k, (s, _) in results.items() if s.accepted and not spark_results[k].accepted}
    spark_only = {k for k, (s, _) in results.items() if not s.accepted and spark_results[k].accepted}
    assert twopc_only == WRITTEN_BUT_SPARK_REFUSES, "cells twopc writes and Spark's writer refuses changed"
    assert spark_only == REFUSED_BUT_SPARK_WRITES, "cells Spark's writer writes and twopc refuses changed"
    differ = [f"{k}: twopc {s.rows}, spark {spark_results[k].rows}" for k, (s, _) in results.items()
              if s.accepted and spark_results[k].accepted and s.rows != spark_results[k].rows]
    assert not differ, "twopc and Spark's writer store different values:\n" + "\n".join(differ)


def test_mariadb_modes_agree(frames, mariadb_url) -> None:
    engine = sa.create_engine(mariadb_url)
    try:
        _assert_modes_agree(_modes(mariadb_url, MySqlXaSink, engine, MY_COLUMNS, frames))
    finally:
        engine.dispose()
