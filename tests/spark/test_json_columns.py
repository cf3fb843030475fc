"""Spark arrays, maps and structs into JSON columns (PostgreSQL ``jsonb``/``json``, MariaDB
``JSON``, SQLite ``JSON``) through every SQL write path: ``twopc-postgres`` (binary and CSV
COPY), the staging mode, MariaDB XA, ``twopc-jdbc`` through Spark (auto, staging, a created
table, overwrite, complete mode), and the README's Redis Stream -> PostgreSQL snippet. A map
or struct into a text column is refused with the fix."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from twopc import sinks
from twopc.sinks import MySqlXaSink, PostgresSink, StagingSink
from twopc.spi import SchemaMismatchError

from tests._paths import REPO_ROOT
from tests._sql_helpers import write_one_task

#: the Redis Stream source's page, whose quickstart and "into PostgreSQL" programs a test runs
STREAM_PAGE = REPO_ROOT / "docs" / "formats" / "redis-stream.md"

#: a DataFrame's nested columns as Spark hands them to a writer (Arrow), one row per case
SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("m", pa.map_(pa.string(), pa.string())),
    ("s", pa.struct([("n", pa.int64()), ("price", pa.decimal128(22, 2)), ("at", pa.timestamp("us", tz="UTC")),
                     ("day", pa.date32()), ("tags", pa.list_(pa.string())), ("kv", pa.map_(pa.int32(), pa.bool_()))])),
    ("a", pa.list_(pa.struct([("x", pa.float64()), ("b", pa.binary())]))),
    ("j", pa.map_(pa.string(), pa.list_(pa.int64()))),
])
ROWS = [
    {"id": 1, "m": [("user", "u0"), ("amount", "7")],
     "s": {"n": 1, "price": Decimal("12345678901234567890.12"), "at": dt.datetime(2020, 1, 2, 3, 4, 5, 123456, dt.UTC),
           "day": dt.date(2020, 1, 2), "tags": ["a", None, 'q"é'], "kv": [(1, True), (2, None)]},
     "a": [{"x": 0.5, "b": b"\x00\x01"}, None, {"x": float("nan"), "b": None}], "j": [("k", [1, None])]},
    {"id": 2, "m": [], "s": {"n": None, "price": None, "at": None, "day": None, "tags": [], "kv": []},
     "a": [], "j": []},
    {"id": 3, "m": None, "s": None, "a": None, "j": None},
]
#: what each cell holds, read back as JSON (decimals with every digit)
EXPECTED = {
    1: {"m": {"user": "u0", "amount": "7"},
        "s": {"n": 1, "price": Decimal("12345678901234567890.12"), "at": "2020-01-02T03:04:05.123456+00:00",
              "day": "2020-01-02", "tags": ["a", None, 'q"é'], "kv": {"1": True, "2": None}},
        "a": [{"x": Decimal("0.5"), "b": "AAE="}, None, {"x": "NaN", "b": None}], "j": {"k": [1, None]}},
    2: {"m": {}, "s": {"n": None, "price": None, "at": None, "day": None, "tags": [], "kv": {}}, "a": [], "j": {}},
    3: {"m": None, "s": None, "a": None, "j": None},
}
#: the column types of a table made for the batch, per database (``j`` is PostgreSQL's json)
JSON_TYPES = {"postgresql": ("jsonb", "json"), "mysql": ("JSON", "JSON"), "sqlite": ("JSON", "JSON")}


def _uid() -> str:
    return uuid.uuid4().hex[:10]


def _batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(ROWS, schema=SCHEMA)


def _read(engine: sa.Engine, table: str) -> dict[int, dict[str, Any]]:
    cast = "::text" if engine.dialect.name == "postgresql" else ""
    with engine.connect() as c:
        rows = c.exec_driver_sql(f"SELECT id, m{cast}, s{cast}, a{cast}, j{cast} FROM {table} ORDER BY id").all()
    return {r[0]: {k: None if v is None else json.loads(v, parse_float=Decimal)
                   for k, v in zip("msaj", r[1:], strict=True)} for r in rows}


def _create(engine: sa.Engine, table: str, *, text_m: bool = False) -> None:
    jsonb, json_ = JSON_TYPES[engine.dialect.name]
    m = "text" if text_m else jsonb
    with engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, m {m}, s {jsonb}, a {jsonb}, j {json_})")


def _writers(url: str, engine: sa.Engine) -> dict[str, Any]:
    """Every commit mode the database has: a function that writes a batch into a table."""
    out: dict[str, Any] = {"staging": lambda t, b: write_one_task(StagingSink(url, t), b)}
    if engine.dialect.name == "postgresql":
        out["prepared, binary COPY"] = lambda t, b: write_one_task(PostgresSink(url, t), b)
        out["prepared, CSV COPY"] = lambda t, b: write_one_task(PostgresSink(url, t, copy_format="csv"), b)
    elif engine.dialect.name == "mysql":
        out["XA"] = lambda t, b: write_one_task(MySqlXaSink(url, t), b)
    return out


def test_maps_structs_and_arrays_are_stored_as_json_by_every_mode(db) -> None:
    """Into existing JSON columns by each mode of each database, and into a table the staging
    mode creates (PostgreSQL jsonb, MariaDB JSON, SQLite JSON): the same JSON everywhere."""
    url, engine = db
    for mode, write in _writers(url, engine).items():
        table = f"jc_{_uid()}"
        _create(engine, table)
        write(table, _batch())
        assert _read(engine, table) == EXPECTED, mode
    created = f"jc_{_uid()}"
    write_one_task(StagingSink(url, created), _batch())
    assert _read(engine, created) == EXPECTED
    with engine.connect() as c:
        if engine.dialect.name == "postgresql":
            types = c.exec_driver_sql("SELECT data_type FROM information_schema.columns WHERE table_name = %s "
                                      "AND column_name <> 'id'", (created,)).scalars().all()
            assert types == ["jsonb"] * 4
        elif engine.dialect.name == "mysql":  # MariaDB's JSON: LONGTEXT checked by JSON_VALID
            ddl = c.exec_driver_sql(f"SHOW CREATE TABLE {created}").one()[1]
            assert ddl.lower().count("json_valid") == 4, ddl
        else:
            ddl = c.exec_driver_sql("SELECT sql FROM sqlite_master WHERE name = ?", (created,)).scalar_one()
            assert ddl.count("JSON") == 4, ddl


@pytest.mark.parametrize("db", ["postgresql", "mariadb"], indirect=True)  # SQLite has no types to refuse by
def test_a_map_into_a_text_column_is_refused_naming_column_types_and_fix(db) -> None:
    """JSON text is one of many texts a map could become: twopc asks for a JSON column or
    ``to_json`` rather than pick one, before anything is written."""
    url, engine = db
    for mode, write in _writers(url, engine).items():
        table = f"jt_{_uid()}"
        _create(engine, table, text_m=True)
        with pytest.raises(SchemaMismatchError) as err:
            write(table, _batch())
        msg = str(err.value)
        assert re.search(r"column m: DataFrame type MAP<STRING, STRING>, table type (text|longtext)", msg), (mode, msg)
        assert "jsonb" in msg and "to_json(m)" in msg, (mode, msg)
        assert "column s" not in msg and "column a" not in msg, (mode, msg)
        with engine.connect() as c:
            assert c.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one() == 0


def _jdbc(df: Any, url: str, table: str, mode: str = "append") -> Any:
    u = make_url(url)
    return (df.write.format("twopc-jdbc").mode(mode)
            .option("url", f"jdbc:postgresql://{u.host}:{u.port}/{u.database}")
            .option("dbtable", table).option("user", u.username).option("password", u.password))


def _frame(spark: Any, lo: int, hi: int) -> Any:
    return spark.range(lo, hi, numPartitions=2).selectExpr(
        "id", "map('user', concat('u', id % 7), 'amount', cast(id AS string)) AS fields",
        "named_struct('price', cast(id AS decimal(22,2)) + 0.25, 'at', timestamp_seconds(1767225600 + id), "
        "'tags', array('a', CASE WHEN id % 2 = 0 THEN NULL ELSE 'b' END)) AS info")


def _jdbc_rows(pg_engine: sa.Engine, table: str) -> dict[int, tuple[Any, Any]]:
    with pg_engine.connect() as c:
        return {i: (f, json.loads(s, parse_float=Decimal)) for i, f, s in
                c.exec_driver_sql(f"SELECT id, fields, info::text FROM {table}").all()}


def _expected_jdbc(ids: range) -> dict[int, tuple[Any, Any]]:
    return {i: ({"user": f"u{i % 7}", "amount": str(i)},
                {"price": Decimal(i) + Decimal("0.25"),
                 "at": (dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i)).isoformat(),
                 "tags": ["a", None if i % 2 == 0 else "b"]}) for i in ids}


def test_twopc_jdbc_writes_nested_columns_in_every_mode(spark, postgres_url, pg_engine, tmp_path) -> None:
    """Through Spark: a missing table is created with jsonb columns, then appends in auto
    (prepared) and staging mode, an overwrite that re-creates the table, and a streaming
    aggregate in complete mode."""
    sinks.register_all(spark)
    table = f"jj_{_uid()}"
    _jdbc(_frame(spark, 0, 4), postgres_url, table).save()  # created (staging)
    with pg_engine.connect() as c:
        types = dict(c.exec_driver_sql("SELECT column_name, data_type FROM information_schema.columns "
                                       "WHERE table_name = %s", (table,)).all())
    assert types == {"id": "bigint", "fields": "jsonb", "info": "jsonb"}
    _jdbc(_frame(spark, 4, 8), postgres_url, table).option("commitMode", "prepared").save()
    _jdbc(_frame(spark, 8, 12), postgres_url, table).option("commitMode", "staging").save()
    _jdbc(_frame(spark, 12, 16), postgres_url, table).save()  # auto
    assert _jdbc_rows(pg_engine, table) == _expected_jdbc(range(16))
    _jdbc(_frame(spark, 20, 23), postgres_url, table, mode="overwrite").save()
    assert _jdbc_rows(pg_engine, table) == _expected_jdbc(range(20, 23))

    agg = f"ja_{_uid()}"
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "0.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(10)))
    u = make_url(postgres_url)
    q = (spark.readStream.schema("id long").json(str(inp))
         .selectExpr("id % 3 AS bucket", "id").groupBy("bucket").agg({"id": "collect_set"})
         .withColumnRenamed("collect_set(id)", "ids")
         .writeStream.outputMode("complete").format("twopc-jdbc")
         .option("url", f"jdbc:postgresql://{u.host}:{u.port}/{u.database}").option("dbtable", agg)
         .option("user", u.username).option("password", u.password)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    with pg_engine.connect() as c:
        got = {b: sorted(ids) for b, ids in c.exec_driver_sql(f"SELECT bucket, ids FROM {agg}").all()}
        kind = c.exec_driver_sql("SELECT data_type FROM information_schema.columns WHERE table_name = %s "
                                 "AND column_name = 'ids'", (agg,)).scalar_one()
    assert got == {0: [0, 3, 6, 9], 1: [1, 4, 7], 2: [2, 5, 8]} and kind == "jsonb"


def _page_block(after: str) -> str:
    """The first heredoc'd Python program of the Redis Stream page after the line holding *after*."""
    text = STREAM_PAGE.read_text()
    start = text.index(after)
    m = re.compile(r"python - <<'PY'\n(.*?)\nPY\n", re.S).search(text, start)
    assert m is not None, f"no python block after {after!r} in {STREAM_PAGE.name}"
    return m.group(1)


def test_the_docs_redis_stream_into_postgresql_snippet(spark, redis_url, postgres_url, pg_engine, tmp_path,
                                                          capsys) -> None:
    """The Redis Stream page's quickstart producer and its "Into PostgreSQL the same way" program, as
    written but for the test's server URLs, the checkpoint folder and fresh names; the rows
    arrive once each and ``fields`` is jsonb holding each entry's fields."""
    name = f"orders_{_uid()}"
    producer = _page_block("Quickstart (paste into a shell").split("\nspark = ")[0]
    program = _page_block("Into PostgreSQL the same way")
    pg = make_url(postgres_url).set(drivername="postgresql").render_as_string(hide_password=False)
    r_url = make_url(redis_url)

    swaps = (("redis.Redis(port=6390)", f"redis.Redis(host={r_url.host!r}, port={r_url.port})"),
             ("redis://127.0.0.1:6390/0", redis_url), ("postgresql://postgres:secret@127.0.0.1:5432/postgres", pg),
             ("/tmp/twopc-quickstart-orders-pg", str(tmp_path / "ck")))
    for old, _ in swaps:
        assert old in producer + program, f"{STREAM_PAGE.name}'s snippets no longer hold {old!r}"

    def local(code: str) -> str:
        for old, new in swaps:
            code = code.replace(old, new)
        return re.sub(r"(?<![-\w])orders(?![-\w])", name, code)  # the stream and the table

    exec(compile(local(producer), "redis-stream.md quickstart", "exec"), {})
    exec(compile(local(program), "redis-stream.md into PostgreSQL", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[-2:] == ["(1000, 499500)", "({'user': 'u0', 'amount': '7'},)"], printed
    with pg_engine.connect() as c:
        kind = c.exec_driver_sql("SELECT data_type FROM information_schema.columns WHERE table_name = %s "
                                 "AND column_name = 'fields'", (name,)).scalar_one()
        rows = c.exec_driver_sql(f'SELECT stream, id, fields, "user", amount FROM {name}').all()
    assert kind == "jsonb"
    assert len(rows) == 1000 and len({(s, i) for s, i, *_ in rows}) == 1000
    assert sorted(a for *_, a in rows) == list(range(1000))
    assert all(s == name and f == {"user": u, "amount": str(a)} and u == f"u{a % 7}" for s, _, f, u, a in rows)


def test_a_refused_row_with_a_map_is_dead_lettered_with_the_map_as_an_object(postgres_url, pg_engine) -> None:
    """The dead-letter table keeps the refused row as JSON, its map an object (a check on
    the jsonb refuses one entry; jsonb cannot hold ``\\u0000``, which refuses another)."""
    table, dead = f"jd_{_uid()}", f"jdead_{_uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (stream text, id text, fields jsonb CHECK (fields ? 'user'))")
    schema = pa.schema([("stream", pa.string()), ("id", pa.string()), ("fields", pa.map_(pa.string(), pa.string()))])
    batch = pa.RecordBatch.from_pylist([
        {"stream": "o", "id": "1-0", "fields": [("user", "u1")]},
        {"stream": "o", "id": "2-0", "fields": [("amount", "2")]},
        {"stream": "o", "id": "3-0", "fields": [("user", "nul\x00")]}], schema=schema)
    write_one_task(PostgresSink(postgres_url, table, dead_letter_table=dead), batch)
    with pg_engine.connect() as c:
        assert c.exec_driver_sql(f"SELECT id, fields FROM {table}").all() == [("1-0", {"user": "u1"})]
        got = c.exec_driver_sql(f"SELECT entry_id, left(reason, 5), row FROM {dead} ORDER BY entry_id").all()
    assert got == [("2-0", "23514", {"stream": "o", "id": "2-0", "fields": {"amount": "2"}}),
                   ("3-0", "22P05", {"stream": "o", "id": "3-0", "fields": {"user": "nul\\u0000"}})]
