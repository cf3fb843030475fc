"""Option ``twopcSchema``: every table twopc keeps beside a target (markers, the ledger of
writes without a checkpoint, batch markers, staging tables) lands in that schema (a database
on MariaDB), created when missing, and none in the user's; a user who may not create or use
it is refused before any task with the statements that fix it; writes without a checkpoint
leave no markers behind; the markers a recovery still needs survive the purge. Real
PostgreSQL and MariaDB servers, the sinks driven as the Spark formats drive them on the
driver (no JVM)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from twopc import CommitCoordinator, ConfigurationError, RecoveryCoordinator, faultinject
from twopc._runtime_options import ephemeral_sink_id
from twopc._target import open_target_ledger, settle_own
from twopc.ledger._ledger import CommitLedger
from twopc.ledger._ledger_records import BatchState
from twopc.sinks import MySqlXaSink, PostgresSink, StagingSink
from twopc.spi import TargetConfigurationError

from .test_marker_privileges import SCHEMA as RESTRICTED_SCHEMA
from .test_marker_privileges import Server, maria, pg  # noqa: F401 - fixtures of the restricted-user tests
from tests._sql_helpers import batch, ctx, prepare, uid

SCHEMA = batch([0]).schema


@pytest.fixture(params=["postgresql", "mysql"])
def place(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, str, str]]:
    """(dialect, URL, the user's schema with table ``t``, a twopc schema that does not exist yet)."""
    dialect = request.param
    name = uid()
    if dialect == "postgresql":
        url = request.getfixturevalue("postgres_url")
        user_ns, twopc_ns = f"us_{name}", f"tp_{name}"
        engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        with engine.connect() as c:
            c.exec_driver_sql(f"CREATE SCHEMA {user_ns}")
            c.exec_driver_sql(f"CREATE TABLE {user_ns}.t (id bigint PRIMARY KEY, s text, x double precision)")
        target_url = url
    else:
        base = make_url(request.getfixturevalue("mariadb_url"))
        user_ns, twopc_ns = f"{base.database}_us{name}", f"{base.database}_tp{name}"  # the test user's databases
        engine = sa.create_engine(base, isolation_level="AUTOCOMMIT")
        with engine.connect() as c:
            c.exec_driver_sql(f"CREATE DATABASE {user_ns}")
            c.exec_driver_sql(f"CREATE TABLE {user_ns}.t (id BIGINT PRIMARY KEY, s TEXT, x DOUBLE) ENGINE=InnoDB")
        target_url = base.set(database=user_ns).render_as_string(hide_password=False)
    try:
        yield dialect, target_url, user_ns, twopc_ns
    finally:
        with engine.connect() as c:
            for ns in (user_ns, twopc_ns):
                c.exec_driver_sql(f"DROP {'SCHEMA' if dialect == 'postgresql' else 'DATABASE'} IF EXISTS {ns}"
                                  + (" CASCADE" if dialect == "postgresql" else ""))
        engine.dispose()


def _tables(url: str, ns: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            return set(sa.inspect(c).get_table_names(schema=ns))
    finally:
        engine.dispose()


def _default_ns_tables(url: str, dialect: str) -> set[str]:
    """twopc's tables in the connection's default schema (PostgreSQL: public)."""
    return {t for t in _tables(url, "public" if dialect == "postgresql" else make_url(url).database or "")
            if t.startswith("twopc_")}


def _write_without_checkpoint(sink: Any, ids: list[int]) -> str:
    """One write without a checkpoint as the Spark runtime does it (its ledger and lease in the
    target): a task prepares, the driver commits, the write settles. Returns its sink id."""
    backend = sink.target_ledger()
    sid = ephemeral_sink_id()
    lease = backend.acquire(sid)
    try:
        ledger = open_target_ledger(backend, sid, lease=lease)
        ledger.bind_sink_id(sid, sid)
        epoch = ledger.claim()
        handle = prepare(sink, ctx(sid, 0), batch(ids))
        CommitCoordinator(sink, open_target_ledger(backend, sid, lease=lease, epoch=epoch), sid,
                          claimed=True).commit_batch(0, [handle])
    finally:
        settle_own(sink, backend, sid, lease)
    return sid


def _prepared_class(dialect: str) -> Any:
    return PostgresSink if dialect == "postgresql" else MySqlXaSink


def test_every_table_of_twopc_lands_in_the_twopc_schema(place: tuple[str, str, str, str], tmp_path: Path) -> None:
    dialect, url, user_ns, twopc_ns = place
    before = _default_ns_tables(url, dialect)
    prepared = _prepared_class(dialect)(url, f"{user_ns}.t", twopc_schema=twopc_ns)
    staging = StagingSink(url, f"{user_ns}.t", twopc_schema=twopc_ns)
    try:
        prepared.validate(SCHEMA)  # creates the schema, then the marker table in it
        _write_without_checkpoint(prepared, [1, 2])
        staging.validate(SCHEMA)
        sid = ephemeral_sink_id()
        CommitCoordinator(staging, CommitLedger(str(tmp_path / sid)), sid).commit_batch(
            0, [prepare(staging, ctx(sid, 0), batch([3, 4]))])
    finally:
        prepared.close()
    assert _tables(url, user_ns) == {"t"}
    made = _tables(url, twopc_ns)
    suffix = "" if dialect == "postgresql" else "_" + _db_hash(url)
    assert {f"twopc_markers{suffix}", f"twopc_ledger{suffix}", f"twopc_batches{suffix}"} <= made, made
    assert any(t.startswith("twopc_stage_") for t in made), made
    assert _default_ns_tables(url, dialect) == before  # nothing new in the connection's default schema
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            assert sorted(r[0] for r in c.exec_driver_sql(f"SELECT id FROM {user_ns}.t")) == [1, 2, 3, 4]
    finally:
        engine.dispose()


def _db_hash(url: str) -> str:
    return hashlib.sha256((make_url(url).database or "").encode()).hexdigest()[:8]


def test_writes_without_checkpoint_leave_no_markers_behind(place: tuple[str, str, str, str]) -> None:
    """Each write without a checkpoint has a sink id of its own, never used again: once it
    settled, its markers only grew the table."""
    dialect, url, user_ns, _twopc_ns = place
    sink = _prepared_class(dialect)(url, f"{user_ns}.t", marker_table=f"{user_ns}.twopc_markers")
    try:
        sink.validate(SCHEMA)
        sids = [_write_without_checkpoint(sink, [10 * n, 10 * n + 1]) for n in range(1, 5)]
        engine = sa.create_engine(url)
        try:
            with engine.connect() as c:
                marker = sink.target.qualified(sink.target.marker)
                left = c.exec_driver_sql(f"SELECT count(*) FROM {marker}").scalar_one()
                rows = c.exec_driver_sql(f"SELECT count(*) FROM {user_ns}.t").scalar_one()
        finally:
            engine.dispose()
        assert rows == 8
        assert left == 0, f"{left} marker rows of the {len(sids)} finished writes are left"
    finally:
        sink.close()


def test_markers_of_a_decided_unfinished_batch_survive_the_purge(postgres_url: str, tmp_path: Path) -> None:
    """The driver dies after committing batch 0's transactions, before marking it; later
    batches commit and purge (keep 2): recovery then still tells batch 0's transactions
    committed (their markers are kept) and the rows are there exactly once."""
    name = uid()
    table, markers = f"tm_{name}", f"twopc_markers_{name}"
    engine = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint PRIMARY KEY, s text, x double precision)")
    sink = PostgresSink(postgres_url, table, marker_table=markers)
    ck, sid = str(tmp_path / "ck"), f"s{name}"
    try:
        sink.validate(SCHEMA)
        handles = [prepare(sink, ctx(sid, 0, p), batch([p])) for p in range(2)]
        with pytest.raises(faultinject.InjectedFault), \
                faultinject.armed("after_commit@batch=0:raise", tmp_path / "faults"):
            CommitCoordinator(sink, CommitLedger(ck), sid).commit_batch(0, handles)
        for b in range(1, 7):
            CommitCoordinator(sink, CommitLedger(ck), sid, keep_last=2).commit_batch(
                b, [prepare(sink, ctx(sid, b), batch([100 + b]))])
        with engine.connect() as c:
            kept = c.exec_driver_sql(f"SELECT DISTINCT batch_id FROM {markers} ORDER BY 1").scalars().all()
        assert 0 in kept, kept  # purged only below the oldest batch recovery may still ask about
        RecoveryCoordinator(PostgresSink(postgres_url, table, marker_table=markers), CommitLedger(ck),
                            sink_id=sid).run()
        assert CommitLedger(ck).state(0) is BatchState.COMMITTED
        with engine.connect() as c:
            ids = c.exec_driver_sql(f"SELECT id FROM {table} ORDER BY id").scalars().all()
        assert ids == [0, 1, *range(101, 107)]
        CommitCoordinator(sink, CommitLedger(ck), sid, keep_last=2).commit_batch(
            7, [prepare(sink, ctx(sid, 7), batch([107]))])
        with engine.connect() as c:
            kept = c.exec_driver_sql(f"SELECT DISTINCT batch_id FROM {markers} ORDER BY 1").scalars().all()
        assert kept == [6, 7], kept  # bounded once nothing older is pending
    finally:
        sink.close()
        with engine.connect() as c:
            c.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
            c.exec_driver_sql(f"DROP TABLE IF EXISTS {markers}")
        engine.dispose()


def test_a_ledger_kept_outside_the_twopc_schema_is_not_forgotten(place: tuple[str, str, str, str]) -> None:
    """A writer with a sinkId of its own and no checkpoint keeps its committed txnVersions in
    the ledger table; with twopcSchema set it is refused, not started with an empty ledger."""
    dialect, url, user_ns, twopc_ns = place
    cls = _prepared_class(dialect)
    marker = f"{user_ns}.twopc_markers"
    old = cls(url, f"{user_ns}.t", marker_table=marker)
    sid = f"app{uid()}"
    try:
        old.validate(SCHEMA)
        backend = old.target_ledger()
        lease = backend.acquire(sid)
        open_target_ledger(backend, sid, lease=lease).bind_sink_id(sid, sid)
        backend.release(lease)
    finally:
        old.close()
    moved = cls(url, f"{user_ns}.t", marker_table=marker, twopc_schema=twopc_ns)  # the ledger moves
    try:
        moved.validate(SCHEMA)
        with pytest.raises(TargetConfigurationError) as err:
            moved.target_ledger().acquire(sid)
    finally:
        moved.close()
    msg = str(err.value)
    assert sid in msg and "INSERT INTO" in msg and "twopc_ledger" in msg, msg


def test_a_missing_twopc_schema_the_user_may_not_create_is_refused_with_the_fix(pg: Server) -> None:  # noqa: F811 - the fixture
    schema = f"tp_{uid()}"
    sink = PostgresSink(pg.user_url, f"{pg.ns}.t", twopc_schema=schema)
    try:
        with pytest.raises(TargetConfigurationError) as err:
            sink.validate(RESTRICTED_SCHEMA)
        msg = str(err.value)
        assert f"CREATE SCHEMA \"{schema}\" AUTHORIZATION {pg.user}" in msg and "nothing was written" in msg, msg
        with pg.admin.connect() as c:
            c.exec_driver_sql(f"CREATE SCHEMA {schema}")
        with pytest.raises(TargetConfigurationError) as err:
            sink.validate(RESTRICTED_SCHEMA)
        msg = str(err.value)
        assert f"GRANT USAGE, CREATE ON SCHEMA \"{schema}\" TO {pg.user}" in msg, msg
        with pg.admin.connect() as c:
            c.exec_driver_sql(f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {pg.user}")
        sink.validate(RESTRICTED_SCHEMA)
        with pg.admin.connect() as c:
            assert c.exec_driver_sql(f"SELECT count(*) FROM {schema}.twopc_markers").scalar_one() == 0
    finally:
        sink.close()
        with pg.admin.connect() as c:
            c.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_a_missing_twopc_database_the_user_may_not_create_is_refused_with_the_fix(maria: Server) -> None:  # noqa: F811 - the fixture
    schema = f"tp_{uid()}"
    sink = MySqlXaSink(maria.user_url, f"{maria.ns}.t", twopc_schema=schema)
    try:
        with pytest.raises(TargetConfigurationError) as err:
            sink.validate(RESTRICTED_SCHEMA)
        msg = str(err.value)
        shown_user = maria.user.replace("%%", "%")
        assert f"CREATE DATABASE IF NOT EXISTS `{schema}`" in msg and f"ON `{schema}`.* TO {shown_user}" in msg, msg
        with maria.admin.begin() as c:
            c.exec_driver_sql(f"CREATE DATABASE {schema}")
            c.exec_driver_sql(f"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX ON `{schema}`.* TO "
                              f"{maria.user}")
        sink.validate(RESTRICTED_SCHEMA)
    finally:
        sink.close()
        with maria.admin.begin() as c:
            c.exec_driver_sql(f"DROP DATABASE IF EXISTS {schema}")


def test_session_defaults_keep_a_checkpoint_where_it_records_its_tables() -> None:
    from twopc.spark._session_options import with_session_defaults

    names = ("twopcSchema",)
    fresh = with_session_defaults({"url": "u"}, {"twopcSchema": "twopc"}, names, None, "/ck")
    assert fresh["twopcSchema"] == "twopc"  # a new checkpoint (nothing recorded): the session's default
    old = with_session_defaults({"url": "u"}, {"twopcSchema": "twopc"}, names, {"url": "u"}, "/ck")
    assert "twopcSchema" not in old  # recorded without it: the old place
    kept = with_session_defaults({"url": "u"}, {"twopcSchema": "other"}, names, {"twopcschema": "twopc"}, "/ck")
    assert kept["twopcSchema"] == "twopc"
    with pytest.raises(ConfigurationError) as err:
        with_session_defaults({"url": "u", "twopcSchema": "b"}, {}, names, {"twopcSchema": "a"}, "/ck")
    assert "twopcSchema=b" in str(err.value) and "twopcSchema=a" in str(err.value) and "/ck" in str(err.value)
    with pytest.raises(ConfigurationError) as err:
        with_session_defaults({"url": "u", "twopcSchema": "b"}, {}, names, {"url": "u"}, "/ck")
    assert "no twopcSchema" in str(err.value)
