"""``twopc recover`` run every second or two beside a running query (``twopc-postgres``, and
``twopc-jdbc`` in XA mode on MariaDB), on a table with a unique key on the source id, for many
micro-batches: each recover fences the query (it
stops with ``FencedError``, never takes the checkpoint back, and commits nothing more), and the
restarts that follow finish the input with every id present exactly once. Real processes: the
query in the suite's Spark, each recover a ``twopc`` process of its own."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from twopc import CommitLedger, sinks
from twopc.recovery.demos.demo import INPUT_SCHEMA, write_input

from tests._ops_helpers import twopc_cli

FILES = 16
ROWS_PER_FILE = 20


@pytest.fixture(scope="module", autouse=True)
def _registered(spark) -> None:
    sinks.register_all(spark)


def _recover_every(ck: Path, options: dict[str, str], stop: threading.Event, outcomes: list[str]) -> None:
    while not stop.is_set():
        done = twopc_cli("recover", "--checkpoint", str(ck), options=options, timeout=120)
        outcomes.append("ok" if done.returncode == 0 else done.stderr.strip().splitlines()[-1])
        stop.wait(1.5)


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_recover_every_few_seconds_fences_the_query_and_restarts_finish_every_id_once(
        kind: str, spark, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    table = f"keyed_{uuid.uuid4().hex[:10]}"
    if kind == "postgres":
        url = request.getfixturevalue("postgres_url")
        engine = request.getfixturevalue("pg_engine")
        ddl = f'CREATE TABLE "{table}" (id bigint NOT NULL UNIQUE, payload text, amount double precision)'
        fmt, options = "twopc-postgres", {"url": url}
    else:
        url = request.getfixturevalue("mariadb_url")
        engine = sa.create_engine(url)
        ddl = f"CREATE TABLE {table} (id BIGINT NOT NULL UNIQUE, payload TEXT, amount DOUBLE) ENGINE=InnoDB"
        u = sa.engine.make_url(url)
        fmt, options = "twopc-jdbc", {"url": f"jdbc:mariadb://{u.host}:{u.port}/{u.database}",
                                      "user": u.username or "", "commitMode": "prepared"}
    with engine.begin() as c:
        c.execute(sa.text(ddl))
    password = sa.engine.make_url(url).password or ""
    ids = write_input(tmp_path / "in", files=FILES, rows_per_file=ROWS_PER_FILE)
    ck = tmp_path / "ck"
    stop, outcomes = threading.Event(), list[str]()
    fenced: list[str] = []
    recovering = None
    for _start in range(60):
        query = (spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
                 .writeStream.format(fmt).options(**options).option("password", password).option("dbtable", table)
                 .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
        if recovering is None:  # once the query has written its ledger: recover needs the checkpoint's records
            while not (ck / "twopc" / "target.json").exists() and query.isActive:
                time.sleep(0.05)
            recovering = threading.Thread(target=_recover_every, args=(ck, {"password": password}, stop, outcomes),
                                          daemon=True)
            recovering.start()
        try:
            query.awaitTermination()
            break  # the whole input is written
        except Exception as exc:  # noqa: BLE001 - the only way a query may end early here is FencedError
            message = str(exc)
            assert "FencedError" in message and "displaced by twopc recover" in message, message
            fenced.append(message)
    else:
        pytest.fail(f"the query did not finish its input in 60 starts ({len(fenced)} fenced)")
    stop.set()
    assert recovering is not None
    recovering.join(180)
    with engine.connect() as c:
        got = [r[0] for r in c.execute(sa.text(f"SELECT id FROM {table} ORDER BY id"))]
    assert got == sorted(ids), "an id is missing or doubled"
    assert CommitLedger(str(ck)).latest_committed() is not None
    assert fenced, "no recover ever met the running query: the test proved nothing"
    assert "ok" in outcomes, outcomes
