"""``txnVersion`` as an ISO date: the most natural run identifier is the day's date. A date
is the number YYYYMMDD, so dates order as days do and either spelling is the same version;
a timestamp is refused with the number to give instead."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from twopc import CommitLedger, ConfigurationError, sinks
from twopc._runtime_options import RuntimeOptions
from twopc.recovery.demos.demo import create_table


def _version(text: str) -> int:
    version = RuntimeOptions.parse({"checkpointLocation": "/tmp/ck", "txnVersion": text}, streaming=False).txn_version
    assert version is not None
    return version


def test_an_iso_date_is_the_number_yyyymmdd() -> None:
    assert _version("2026-11-22") == _version("20261122") == 20261122
    assert _version(" 2026-11-22 ") == 20261122
    assert _version("2026-11-21") < _version("2026-11-22") < _version("2026-12-01") < _version("2027-01-01")


def test_what_is_not_a_version_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigurationError, match=r"'2026-02-30' is not a date of the calendar"):
        _version("2026-02-30")
    with pytest.raises(ConfigurationError) as err:
        _version("2026-11-22T10:30:00")
    assert "give the number 20261122103000 as txnVersion" in str(err.value)
    assert "Nothing was written" in str(err.value)
    with pytest.raises(ConfigurationError, match=r"20261122093000 \(UTC\)"):
        _version("2026-11-22T10:30:00+01:00")
    with pytest.raises(ConfigurationError, match=r"non-negative integer or an ISO date \(2026-11-22"):
        _version("22/11/2026")


def test_the_same_date_writes_once_and_a_later_date_writes(spark, postgres_url, tmp_path) -> None:
    sinks.register_all(spark)
    table = f"ver_{uuid.uuid4().hex[:10]}"
    create_table(postgres_url, table)
    ck = str(tmp_path / "ck")

    def write(lo: int, version: str) -> None:
        df = spark.range(lo, lo + 10, numPartitions=2).selectExpr(
            "id", "concat('p', id) as payload", "cast(id as double) as amount")
        (df.write.format("twopc-jdbc").mode("append")
            .option("url", postgres_url).option("dbtable", table)
            .option("checkpointLocation", ck).option("txnVersion", version).save())

    write(0, "2026-11-22")
    write(10, "2026-11-22")  # the same run again: writes nothing
    write(20, "20261122")  # the same version, spelled as a number
    write(30, "2026-11-21")  # an older day: writes nothing
    write(40, "2026-11-23")
    engine = sa.create_engine(postgres_url)
    try:
        with engine.connect() as c:
            ids = sorted(c.execute(sa.text(f'SELECT id FROM "{table}"')).scalars())
    finally:
        engine.dispose()
    assert ids == [*range(10), *range(40, 50)]
    assert CommitLedger(ck).committed_batches() == [20261122, 20261123]
