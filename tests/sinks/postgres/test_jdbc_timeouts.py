"""``socketTimeout`` and ``lockTimeout`` together: a URL with a short pgjdbc ``socketTimeout``
(which Spark's JDBC writer takes) gets a lock timeout that fits inside it, unless the user
chose both and they conflict."""

from __future__ import annotations

import logging
import urllib.parse

import pytest
import sqlalchemy as sa

from twopc import CommitOutcome, ConfigurationError
from twopc.sinks import JdbcOptions, PostgresSink
from twopc.sinks._options import Duration

from tests._sql_helpers import batch, ctx, prepare, uid


def _jdbc(sa_url: str, query: str) -> str:
    u = sa.make_url(sa_url)
    pw = urllib.parse.quote(u.password or "", safe="")
    return f"jdbc:postgresql://{u.host}:{u.port}/{u.database}?user={u.username}&password={pw}&{query}"


def test_a_short_socket_timeout_without_lock_timeout_gets_half_of_it(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="twopc.sinks.sql"):
        o = JdbcOptions.parse({"url": "jdbc:postgresql://h/app?socketTimeout=10", "dbtable": "t"})
    assert (o.socket_timeout, o.lock_timeout) == (Duration(10_000), Duration(5000))
    assert "lockTimeout 5s (half of the socketTimeout in the url, 10s" in caplog.text
    o = JdbcOptions.parse({"url": "jdbc:postgresql://h/app", "dbtable": "t", "socketTimeout": "20s"})
    assert (o.socket_timeout, o.lock_timeout) == (Duration(20_000), Duration(10_000))
    o = JdbcOptions.parse({"url": "jdbc:mysql://h/app?socketTimeout=10000", "dbtable": "t"})  # Connector/J: ms
    assert (o.socket_timeout, o.lock_timeout) == (Duration(10_000), Duration(5000))
    # long enough for the default: left alone
    o = JdbcOptions.parse({"url": "jdbc:postgresql://h/app?socketTimeout=45", "dbtable": "t"})
    assert (o.socket_timeout, o.lock_timeout) == (Duration(45_000), Duration(30_000))


def test_both_timeouts_given_and_in_conflict_are_refused_naming_both() -> None:
    with pytest.raises(ConfigurationError) as err:
        JdbcOptions.parse({"url": "jdbc:postgresql://h/app?socketTimeout=10", "dbtable": "t", "lockTimeout": "30s"})
    text = str(err.value)
    assert "socketTimeout in the url (10 s) must be longer than lockTimeout (30 s)" in text
    assert "Raise socketTimeout or lower lockTimeout" in text
    with pytest.raises(ConfigurationError, match=r"\(30 s\): .*Raise socketTimeout or lower queryTimeout"):
        JdbcOptions.parse({"url": "jdbc:postgresql://h/app?socketTimeout=10", "dbtable": "t", "queryTimeout": "30"})
    # MySQL counts lock waits in whole seconds (at least 1): a 1 s socket timeout leaves no room
    with pytest.raises(ConfigurationError, match=r"longer than lockTimeout \(30 s \(the default\)\)"):
        JdbcOptions.parse({"url": "jdbc:mysql://h/app?socketTimeout=1000", "dbtable": "t"})


def test_a_write_through_a_url_with_a_short_socket_timeout_uses_the_derived_lock_timeout(
        postgres_url: str, pg_engine: sa.Engine) -> None:
    table, log_table, sink_id = f"t_{uid()}", f"log_{uid()}", f"s_{uid()}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint PRIMARY KEY, s text, x double precision)")
        c.exec_driver_sql(f"CREATE TABLE {log_table} (lock_timeout text)")
    try:
        sink = PostgresSink.from_options({
            "url": _jdbc(postgres_url, "socketTimeout=10"), "dbtable": table,
            "sessionInitStatement": f"INSERT INTO {log_table} SELECT current_setting('lock_timeout')"})
        sink.validate(batch([0]).schema)
        assert sink.commit(prepare(sink, ctx(sink_id), batch([1, 2]))) is CommitOutcome.COMMITTED
        sink.close()
        with pg_engine.connect() as c:
            assert c.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one() == 2
            assert c.exec_driver_sql(f"SELECT DISTINCT lock_timeout FROM {log_table}").scalars().all() == ["5s"]
    finally:
        with pg_engine.begin() as c:
            c.exec_driver_sql(f"DROP TABLE {table}")
            c.exec_driver_sql(f"DROP TABLE {log_table}")
