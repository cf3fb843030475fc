"""One options layer for every sink (no server): the shared reader and duration type, and
``twopc-postgres`` and ``twopc-jdbc`` reading the same options and URLs to the same result."""

from __future__ import annotations

import importlib
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
    import twopc.spi
    from twopc import sinks
    sinks.register_all  # noqa: B018 - importable without any driver
    assert sinks.JdbcSink and sinks.FileSink and sinks.PostgresHandle and sinks.MySqlXaHandle
    assert "twopc.postgres" in twopc.spi.runtime.registered_handle_kinds()  # ledgers stay readable
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
    "twopc-redis": lambda o: importlib.import_module("twopc.sinks").RedisSink.from_options(
        {"url": "redis://h:6379/0", "mapping": '[{"op": "INCRBY", "key": "{t}:n", "by": 1}]', **o}),
    "twopc-redis-stream": lambda o: importlib.import_module("twopc.sinks.redis_source").StreamOptions.read(
        {"url": "redis://h:6379/0", "streams": "s", "group": "g", **o}),
    "twopc-file": lambda o: FileSink.from_options({"path": "/tmp/x", **o}),
    "twopc-composite": lambda o: importlib.import_module("twopc.sinks").OptionsCompositeSink.from_options(
        {"targets": "orders", "orders.format": "twopc-file", "orders.path": "/tmp/x", **o}),
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
    ("twopc-composite", "order.path", "orders.path"),  # a participant's name misspelled
    ("twopc-composite", "targest", "targets"),
])
def test_an_unknown_option_is_refused_naming_the_closest_known_one(fmt: str, typo: str, meant: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        _NEAR_BUILDERS[fmt]({typo: "1"})
    first_line = str(err.value).splitlines()[0]
    assert typo in first_line and f"did you mean {meant!r}?" in first_line, first_line


@pytest.mark.parametrize("fmt", sorted(_NEAR_BUILDERS))
def test_options_spark_passes_by_itself_stay_accepted(fmt: str) -> None:
    _NEAR_BUILDERS[fmt]({"path": "/tmp/x", "queryname": "q"})


#: each format's options with a required one misspelled (and so missing): (format, options, typo, meant)
_MISSPELLED_REQUIRED: list[tuple[str, dict[str, str], str, str]] = [
    ("twopc-jdbc", {"url": "jdbc:postgresql://h/app", "dbtabel": "t"}, "dbtabel", "dbtable"),
    ("twopc-jdbc", {"url": "jdbc:postgresql://h/app", "Tabel": "t"}, "Tabel", "table"),
    ("twopc-jdbc", {"urll": "jdbc:postgresql://h/app", "dbtable": "t"}, "urll", "url"),
    ("twopc-postgres", {"url": "jdbc:postgresql://h/app", "dbtabel": "t"}, "dbtabel", "dbtable"),
    ("twopc-redis", {"url": "redis://h:6379/0", "mapings": "[]"}, "mapings", "mapping"),
    ("twopc-redis-stream", {"url": "redis://h:6379/0", "stream": "s", "group": "g"}, "stream", "streams"),
    ("twopc-file", {"paht": "/tmp/x"}, "paht", "path"),
    ("twopc-composite", {"tagets": "orders", "orders.format": "twopc-file"}, "tagets", "targets"),
    ("twopc-composite", {"targets": "orders", "orders.fromat": "twopc-file"}, "orders.fromat", "orders.format"),
]
_BUILD = {
    "twopc-jdbc": lambda o: JdbcOptions.parse(o),
    "twopc-postgres": lambda o: PostgresSink.from_options(o),
    "twopc-redis": lambda o: importlib.import_module("twopc.sinks").RedisSink.from_options(o),
    "twopc-redis-stream": lambda o: importlib.import_module("twopc.sinks.redis_source").StreamOptions.read(o),
    "twopc-file": lambda o: FileSink.from_options(o),
    "twopc-composite": lambda o: importlib.import_module("twopc.sinks").OptionsCompositeSink.from_options(o),
}


@pytest.mark.parametrize(("fmt", "options", "typo", "meant"), _MISSPELLED_REQUIRED)
def test_a_misspelled_required_option_is_named_not_just_missing(fmt: str, options: dict[str, str], typo: str,
                                                                meant: str) -> None:
    """The error names the option given and the one meant, whichever check fails first."""
    with pytest.raises(ConfigurationError) as err:
        _BUILD[fmt]({**options, "path": "/spark/path", "queryname": "q", "checkpointlocation": "/ck"})
    text = str(err.value)
    assert typo in text and f"did you mean {meant!r}?" in text, text
    assert "'path'" not in text.split("did you mean")[0] and "queryname" not in text  # Spark's own: never flagged


def test_the_reader_names_the_misspelling_of_a_missing_option_first() -> None:
    r = OptionReader({"mapping": "m", "URLL": "redis://h", "path": "/p", "checkpointLocation": "/ck"}, "twopc-x")
    assert r.text("mapping") == "m"
    with pytest.raises(MissingOptionError) as err:
        r.required("url", '.option("url", "redis://host:6379/0")')
    assert str(err.value).startswith("unknown option 'URLL': did you mean 'url'? twopc-x needs option \"url\"")
    far = OptionReader({"colour": "red"}, "twopc-x")  # nothing close: only what is missing
    with pytest.raises(MissingOptionError) as err:
        far.required("url", "e.g.")
    assert str(err.value) == 'twopc-x needs option "url", e.g. e.g.'


def test_sslmode_as_an_option_to_twopc_postgres_is_honoured_not_ignored() -> None:
    sink = PostgresSink.from_options({"url": "jdbc:postgresql://h/app", "dbtable": "t", "sslmode": "require"})
    assert sink.options.url.query["sslmode"] == "require"
    with pytest.raises(ConfigurationError, match="sslmode must be one of"):
        PostgresSink.from_options({"url": "jdbc:postgresql://h/app", "dbtable": "t", "sslmode": "requried"})
