"""A failed batch job leaves nothing prepared once ``save()`` has raised, even from a task that
was still running when a sibling's failure aborted the job, that prepared after the driver's
abort record and was killed before it could roll back (the zombie-prepare and late-rollback
windows, see twopc._fence).

Through Spark against the real PostgreSQL and MariaDB: partition 0 fails for good, partition
1 holds before it prepares until the driver's abort is over, then prepares and is SIGKILLed.
Right when ``save()`` raised, and once that late sibling is gone, no prepared transaction of
the sink is left, and nothing was written."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from twopc import faultinject, sinks
from twopc.spi.lease import default_sink_id


@pytest.fixture(scope="module", autouse=True)
def _registered(spark) -> None:
    sinks.register_all(spark)


@pytest.fixture
def slow_kill(spark) -> Iterator[None]:
    """Spark kills the Python worker of a cancelled task ``spark.python.task.killTimeout``
    (default 2 s, on top of a 2 s poll) after the job failed. The late sibling of this test
    must outlive the driver's abort to prepare after it, deterministically: give it longer
    (the live SparkEnv conf, which local mode's executor shares; restored after)."""
    conf = spark.sparkContext._jsc.sc().conf()
    key = "spark.python.task.killTimeout"
    old = conf.getOption(key)
    conf.set(key, "120s")
    try:
        yield
    finally:
        if old.isDefined():
            conf.set(key, old.get())
        else:
            conf.remove(key)


def _release_late(state: Path, ck: str, raised: threading.Event) -> threading.Thread:
    """Release the held sibling once ``save()`` raised (the driver's abort and sweep are over),
    or, as a driver's abort that waits for its tasks keeps ``save()`` from raising, a few
    seconds after the abort is recorded in the ledger."""
    def release() -> None:
        deadline = time.monotonic() + 300
        while not list((Path(ck) / "twopc" / "aborted").glob("*.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        raised.wait(5)
        (state / faultinject.RELEASE_FILE).touch()

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    return thread


def _fail_with_a_late_sibling(spark, writer_for, tmp_path: Path, ck: str, left: Callable[[], object]) -> object:
    """Run the write with partition 0 failing for good (a ``raise`` at ``before_pre_commit``,
    every attempt) and partition 1 holding there, every row read, until the driver's abort
    is over (:func:`_release_late`), then preparing and dying (``after_pre_commit``:
    SIGKILL); return what *left* finds right after ``save()`` raised. Returns once that late
    sibling is gone."""
    state = tmp_path / "faults"
    plan = ("before_pre_commit@partition=0:raise*10,before_pre_commit@partition=1:hold,"
            "after_pre_commit@partition=1:kill")
    df = spark.range(0, 40, numPartitions=2).selectExpr("id", "concat('event-', id) AS payload")
    sc = spark.sparkContext
    group = f"zombie-{uuid.uuid4().hex[:8]}"
    raised = threading.Event()
    with faultinject.armed(plan, state, spark_context=sc):
        # a data source's Python workers get the environment of its registration: register again
        sinks.register_all(spark)
        sc.setJobGroup(group, "a failing job with a late sibling")
        releaser = _release_late(state, ck, raised)
        try:
            with pytest.raises(Exception, match="InjectedFault"):
                writer_for(df).save()
            found = left()
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)  # None clears it
            raised.set()
            releaser.join()
        tracker = sc.statusTracker()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # the late sibling prepares and dies
            stages = [s for j in tracker.getJobIdsForGroup(group) if (info := tracker.getJobInfo(j))
                      for s in info.stageIds]
            if stages and all((st := tracker.getStageInfo(s)) is None or st.numActiveTasks == 0 for s in stages):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the late sibling task did not end")
    sinks.register_all(spark)  # disarmed again for the tests after this one
    assert any("after_pre_commit (kill)" in f for f in faultinject.read_firings(state))
    return found


def test_postgres_failed_job_leaves_no_prepared_transaction(spark, slow_kill, postgres_url, pg_engine,
                                                            tmp_path) -> None:
    table = f"zp_{uuid.uuid4().hex[:10]}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint, payload text)")
    u = make_url(postgres_url)
    ck = str(tmp_path / "ck")

    def writer(df):
        return (df.write.format("twopc-jdbc").mode("append")
                .option("url", f"jdbc:postgresql://{u.host}:{u.port}/{u.database}").option("dbtable", table)
                .option("user", u.username).option("password", u.password).option("commitMode", "prepared")
                .option("checkpointLocation", ck).option("txnVersion", "1"))

    def left() -> tuple[list[str], int]:
        with pg_engine.connect() as c:
            prepared = c.execute(sa.text("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE :p"),
                                 {"p": f"twopc:{default_sink_id(ck)}:%"}).scalars().all()
            rows = c.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one()
        return list(prepared), int(rows)

    assert _fail_with_a_late_sibling(spark, writer, tmp_path, ck, left) == ([], 0)
    assert left() == ([], 0)


def test_mariadb_failed_job_leaves_no_prepared_xa_transaction(spark, slow_kill, mariadb_url, tmp_path) -> None:
    table = f"zp_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(mariadb_url)
    u = make_url(mariadb_url)
    ck = str(tmp_path / "ck")

    def writer(df):
        return (df.write.format("twopc-jdbc").mode("append")
                .option("url", f"jdbc:mariadb://{u.host}:{u.port}/{u.database}").option("dbtable", table)
                .option("user", u.username).option("password", u.password).option("commitMode", "prepared")
                .option("checkpointLocation", ck).option("txnVersion", "1"))

    def left() -> tuple[list[bytes], int]:
        with engine.connect() as c:
            xids = [x[3] if isinstance(x[3], bytes) else str(x[3]).encode() for x in c.exec_driver_sql("XA RECOVER")]
            rows = c.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one()
        return [x for x in xids if f"twopc:{default_sink_id(ck)}:".encode() in x], int(rows)

    try:
        with engine.begin() as c:
            c.exec_driver_sql(f"CREATE TABLE {table} (id BIGINT, payload TEXT) ENGINE=InnoDB")
        assert _fail_with_a_late_sibling(spark, writer, tmp_path, ck, left) == ([], 0)
        assert left() == ([], 0)
    finally:
        engine.dispose()
