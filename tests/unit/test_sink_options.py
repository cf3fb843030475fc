"""One options layer for every sink (no server): the shared reader and duration type, and
``twopc-postgres`` and ``twopc-jdbc`` reading the same options and URLs to the same result."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from twopc import ConfigurationError
from twopc.sinks import FileSink, JdbcOptions, PostgresSink
from twopc.sinks._options import Duration, OptionReader
from twopc.spi import MissingOptionError

PW = "S3cr3t-Pa55!"

# -- the reader ------------------------------------------------------------------------------


def test_reader_is_case_insensitive_and_refuses_what_nobody_read() -> None:
    r = OptionReader({"URL": "u", "Mapping": "m", "hashtag": "t", "colour": "red", "queryName": "q", "path": "/p",
                      "checkpointLocation": "/ck", "txnVersion": "3"}, "twopc-x")
    assert (r.get("url"), r.text("mapping"), r.text("hashTag")) == ("u", "m", "t")
    with pytest.raises(ConfigurationError) as info:
        r.refuse_unknown()
    message = str(info.value)
    assert "colour" in message and "twopc-x" in message and "url, mapping, hashTag" in message
    assert "queryName" not in message.split("Supported")[0]  # Spark's and the runtime's own are accepted


def test_two_spellings_of_one_key_must_agree() -> None:
    assert OptionReader({"url": "a", "URL": "a"}, "f").get("url") == "a"
    with pytest.raises(ConfigurationError, match="given twice"):
        OptionReader({"url": "a", "URL": "b"}, "f")


@pytest.mark.parametrize(("text", "ms"), [
    ("30s", 30_000), ("500ms", 500), ("2min", 120_000), ("1h", 3_600_000), ("1d", 86_400_000), ("250us", 1),
    ("30", 30_000), ("0.5", 500), (" 2 min ", 120_000), ("0", 0), ("10SEC", 10_000), (7, 7000), (0.25, 250),
])
def test_durations_parse_one_way_everywhere(text: str | float, ms: int) -> None:
    assert Duration.parse(text, "x") == Duration(ms)


@pytest.mark.parametrize("text", ["soon", "-1", "5 weeks", "1m", "", "30 s s", True, float("nan"), -2])
def test_bad_durations_name_the_option(text: object) -> None:
    with pytest.raises(ConfigurationError, match="lockTimeout"):
        Duration.parse(text, "lockTimeout")  # type: ignore[arg-type]  # the wrong types are the test


def test_durations_print_as_users_write_them() -> None:
    assert [str(Duration(ms)) for ms in (30_000, 500, 120_000, 3_600_000, 1500, 0)] == [
        "30s", "500ms", "2min", "1h", "1500ms", "0s"]
    assert Duration(1500).whole_seconds == 2 and Duration(0).whole_seconds == 0


# -- twopc-postgres and twopc-jdbc: one reader ----------------------------------------------

URLS = [
    "jdbc:postgresql://db.example:5432/app",
    "jdbc:postgresql://db.example/app?ssl=true",
    "jdbc:postgresql://db.example/app?ssl=true&sslmode=require",
    "jdbc:postgresql://db.example/app?sslmode=verify-ca&sslrootcert=/ca.pem",
    f"jdbc:postgresql://db.example/app?user=app&password={PW}",
    "jdbc:postgresql://h1:5432,h2:5433/app?targetServerType=primary",
    "jdbc:postgresql://db.example/app?currentSchema=sales&ApplicationName=etl",
    "jdbc:postgresql://db.example/app?connectTimeout=7&reWriteBatchedInserts=true",
    "postgresql://app@db.example:5432/app?sslmode=require",
    "postgresql+psycopg2://app@db.example/app",
]


@pytest.mark.parametrize("url", URLS)
def test_both_formats_read_a_url_the_same_way(url: str) -> None:
    via_jdbc = JdbcOptions.parse({"url": url, "dbtable": "events"})
    via_pg = PostgresSink.from_options({"url": url, "dbtable": "events"}).options
    assert via_pg.url == via_jdbc.url and via_pg.connect_timeout == via_jdbc.connect_timeout
    assert via_pg.url.drivername == "postgresql+psycopg"


def test_ssl_true_means_verify_full_through_either_format() -> None:
    url = "jdbc:postgresql://db.example/app?ssl=true"
    assert PostgresSink.from_options({"url": url, "dbtable": "t"}).options.url.query["sslmode"] == "verify-full"
    assert JdbcOptions.parse({"url": url, "dbtable": "t"}).url.query["sslmode"] == "verify-full"


@pytest.mark.parametrize("build", [
    lambda o: JdbcOptions.parse(o), lambda o: PostgresSink.from_options(o),
], ids=["twopc-jdbc", "twopc-postgres"])
@pytest.mark.parametrize(("extra", "needle"), [
    ({"url": "jdbc:postgresql://h/app?frobnicate=1"}, "parameter frobnicate in the JDBC URL"),
    ({"frobnicate": "1"}, "option frobnicate"),
    ({"lockTimeout": "soon"}, "lockTimeout"),
    ({"numPartitions": "4"}, "df.coalesce"),
    ({"isolationLevel": "NONE"}, "isolationLevel=NONE"),
    ({"url": f"jdbc:postgresql://h/app?user=u&password={PW}&bogus=1"}, "a parameter after password="),
])
def test_both_formats_refuse_the_same_options_the_same_way(build, extra: dict[str, str], needle: str) -> None:
    options = {"url": "jdbc:postgresql://h/app", "dbtable": "t", **extra}
    with pytest.raises(ConfigurationError) as info:
        build(options)
    assert needle in str(info.value) and PW not in str(info.value)


def test_both_formats_take_sparks_own_options() -> None:
    spark_adds = {"queryName": "q1", "path": "/ignored", "checkpointLocation": "/ck", "txnVersion": "1"}
    base = {"url": "jdbc:postgresql://h/app", "dbtable": "t"}
    assert JdbcOptions.parse({**base, **spark_adds}) == JdbcOptions.parse(base)
    assert PostgresSink.from_options({**base, **spark_adds}).options.url == JdbcOptions.parse(base).url
    assert FileSink.from_options({"path": "/tmp/out", "queryName": "q1"}).path == "/tmp/out"


def test_the_same_option_means_the_same_in_both_formats() -> None:
    opts = {"url": "jdbc:postgresql://h/app", "dbtable": "Public.Events", "lockTimeout": "15", "queryTimeout": "2min",
            "isolationLevel": "serializable", "sessionInitStatement": "SET x = 1", "connectTimeout": "3",
            "markerTable": "ops.m", "copyFormat": "csv", "batchsize": "5000"}
    pg = PostgresSink.from_options(opts).options
    jdbc = JdbcOptions.parse(opts)
    for field in ("table", "lock_timeout", "query_timeout", "isolation_level", "session_init_statement",
                  "connect_timeout", "marker_table", "copy_format", "batch_size"):
        assert getattr(pg, field) == getattr(jdbc, field), field
    assert pg.lock_timeout == Duration(15_000)  # a plain number is seconds for every sink


@pytest.mark.parametrize("option", ["upsertKeys", "saveMode", "stagingTable", "truncate", "createTableOptions",
                                    "createTableColumnTypes", "tableComment"])
def test_twopc_postgres_points_staging_options_to_twopc_jdbc(option: str) -> None:
    value = {"createTableColumnTypes": "id BIGINT", "truncate": "true", "saveMode": "overwrite"}.get(option, "id")
    with pytest.raises(ConfigurationError) as info:
        PostgresSink.from_options({"url": "jdbc:postgresql://h/app", "dbtable": "t", option: value})
    assert option in str(info.value) and "twopc-jdbc" in str(info.value)
    JdbcOptions.parse({"url": "jdbc:postgresql://h/app", "dbtable": "t", option: value})  # fine there
    with pytest.raises(ConfigurationError, match="commitMode=staging"):
        PostgresSink.from_options({"url": "jdbc:postgresql://h/app", "dbtable": "t", "commitMode": "staging"})


def test_twopc_postgres_refuses_other_databases_and_missing_options() -> None:
    with pytest.raises(ConfigurationError, match="writes to PostgreSQL"):
        PostgresSink.from_options({"url": "jdbc:mysql://h/app", "dbtable": "t"})
    with pytest.raises(MissingOptionError, match='twopc-postgres needs option "url"'):
        PostgresSink.from_options({"dbtable": "t"})
    with pytest.raises(MissingOptionError, match="dbtable"):
        PostgresSink.from_options({"url": "postgresql://h/app"})


# -- drivers are extras -----------------------------------------------------------------------

_WITHOUT = textwrap.dedent("""
    import sys
    for name in ("psycopg", "pymysql", "redis"):
        sys.modules[name] = None  # as if the extra were not installed
    import sinks, twopc.spi
    sinks.register_all  # noqa: B018 - importable without any driver
    assert sinks.JdbcSink and sinks.FileSink and sinks.PostgresHandle and sinks.MySqlXaHandle
    assert "twopc.postgres" in twopc.spi.registered_handle_kinds()  # ledgers stay readable
    for name, extra in (("PostgresSink", "postgres"), ("MySqlXaSink", "mysql"), ("RedisSink", "redis")):
        try:
            getattr(sinks, name)
        except ImportError as exc:
            assert f"pyspark-twopc[{extra}]" in str(exc), exc
        else:
            raise AssertionError(name + " imported without its driver")
    try:
        sinks.PostgresDataSource.sink_class
    except ImportError as exc:
        assert "pyspark-twopc[postgres]" in str(exc), exc
    else:
        raise AssertionError("the twopc-postgres data source found its sink without psycopg")
    print("ok")
""")


def test_a_missing_driver_names_the_extra_and_nothing_else_breaks() -> None:
    done = subprocess.run([sys.executable, "-c", _WITHOUT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


_STAGING_WITHOUT_PSYCOPG = textwrap.dedent("""
    import sys
    sys.modules["psycopg"] = None  # as if pyspark-twopc[postgres] were not installed
    import pyarrow as pa
    from twopc.sinks import StagingSink
    sink = StagingSink("postgresql://u@127.0.0.1:1/db", "t")  # options alone need no driver
    try:
        sink.validate(pa.schema([("id", pa.int64())]))
    except ImportError as exc:
        assert "pyspark-twopc[postgres]" in str(exc), exc
        print("ok")
""")


def test_a_sql_url_without_its_driver_names_the_extra() -> None:
    done = subprocess.run([sys.executable, "-c", _STAGING_WITHOUT_PSYCOPG], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


# -- every format refuses an unknown option, naming the closest known one ----
_NEAR_BUILDERS = {
    "twopc-jdbc": lambda o: JdbcOptions.parse({"url": "jdbc:postgresql://h/app", "dbtable": "t", **o}),
    "twopc-postgres": lambda o: PostgresSink.from_options({"url": "jdbc:postgresql://h/app", "dbtable": "t", **o}),
    "twopc-redis": lambda o: __import__("twopc.sinks").RedisSink.from_options(
        {"url": "redis://h:6379/0", "mapping": '[{"op": "INCRBY", "key": "{t}:n", "by": 1}]', **o}),
    "twopc-redis-stream": lambda o: __import__("twopc.sinks.redis_source").redis_source.StreamOptions.read(
        {"url": "redis://h:6379/0", "streams": "s", "group": "g", **o}),
    "twopc-file": lambda o: FileSink.from_options({"path": "/tmp/x", **o}),
}


@pytest.mark.parametrize(("fmt", "typo", "meant"), [
    ("twopc-jdbc", "locktimout", "lockTimeout"),
    ("twopc-jdbc", "upsertkey", "upsertKeys"),
    ("twopc-postgres", "LockTimout", "lockTimeout"),
    ("twopc-postgres", "batchsise", "batchsize"),
    ("twopc-redis", "hashtg", "hashTag"),
    ("twopc-redis", "durabilty", "durability"),
    ("twopc-redis-stream", "maxentriespertriger", "maxEntriesPerTrigger"),
    ("twopc-file", "pathh", "path"),
    ("twopc-file", "txnversoin", "txnVersion"),  # a misspelled runtime option reaches the sink
    ("twopc-redis", "checkpointlocaton", "checkpointLocation"),
])
def test_an_unknown_option_is_refused_naming_the_closest_known_one(fmt: str, typo: str, meant: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        _NEAR_BUILDERS[fmt]({typo: "1"})
    first_line = str(err.value).splitlines()[0]
    assert typo in first_line and f"did you mean {meant}?" in first_line, first_line


@pytest.mark.parametrize("fmt", sorted(_NEAR_BUILDERS))
def test_options_spark_passes_by_itself_stay_accepted(fmt: str) -> None:
    _NEAR_BUILDERS[fmt]({"path": "/tmp/x", "queryname": "q"})


def test_sslmode_as_an_option_to_twopc_postgres_is_honoured_not_ignored() -> None:
    sink = PostgresSink.from_options({"url": "jdbc:postgresql://h/app", "dbtable": "t", "sslmode": "require"})
    assert sink.options.url.query["sslmode"] == "require"
    with pytest.raises(ConfigurationError, match="sslmode must be one of"):
        PostgresSink.from_options({"url": "jdbc:postgresql://h/app", "dbtable": "t", "sslmode": "requried"})
