"""What the tests of the prepared-transaction SQL sinks share: fresh names, the rows they
write, and one task attempt's life (begin, load, prepare; rolled back on any failure)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any, TypeVar

import pyarrow as pa
import pytest
import sqlalchemy as sa

from twopc import TransactionContext, TwoPhaseCommitSink
from twopc._target import open_target_ledger
from twopc.spi import WriteSetup, capability
from twopc.spi.lease import Lease, TargetLedger

S = TypeVar("S", bound="TwoPhaseCommitSink[Any, Any, Any]")


def uid() -> str:
    """10 random hex digits, for table names and sink ids."""
    return uuid.uuid4().hex[:10]


def ctx(sink_id: str, batch: int = 1, partition: int = 0, attempt: int = 1) -> TransactionContext:
    return TransactionContext(sink_id, batch, partition, attempt)


def batch(ids: list[int], **cols: Any) -> pa.RecordBatch:
    """Rows ``(id bigint, s text, x double)``; ``s`` and ``x`` default to ``v<id>`` and ``id/2``."""
    data: dict[str, Any] = {"id": pa.array(ids, pa.int64())}
    data["s"] = pa.array(cols.get("s", [f"v{i}" for i in ids]), pa.string())
    data["x"] = pa.array(cols.get("x", [i / 2 for i in ids]), pa.float64())
    return pa.record_batch(data)


def write_one_task(sink: Any, batch: pa.RecordBatch, *, overwrite: bool = False) -> None:
    """One task of one batch through *sink*, as the runtime drives it, committed (a staging
    sink's handle through ``commit_all``, a prepared one's through ``commit``)."""
    from twopc.sinks import StagingSink

    try:
        sink.configure_write(batch.schema, overwrite=overwrite, streaming=False, checkpointed=True)
        sink.validate(batch.schema)
        txn = sink.begin_transaction(TransactionContext(f"w{uid()}", 1, 0, 1, 0))
        try:
            sink.invoke_batch(txn, batch)
            handle = sink.pre_commit(txn)
        except BaseException:
            sink.rollback(txn)
            raise
        sink.commit_all([handle]) if isinstance(sink, StagingSink) else sink.commit(handle)
    finally:
        sink.close()


def prepare(sink: Any, context: TransactionContext, *batches: pa.RecordBatch) -> Any:
    """One task attempt: begin, load *batches*, prepare; rolled back if anything fails."""
    txn = sink.begin_transaction(context)
    try:
        for b in batches:
            sink.invoke_batch(txn, b)
        return sink.pre_commit(txn)
    except BaseException:
        sink.rollback(txn)
        raise


def leased_writer(sink: Any, backend: TargetLedger, sink_id: str, batch_id: int,
                  row: dict[str, Any]) -> tuple[Lease, int, Any]:
    """A write without a checkpoint as its driver and one task leave it mid-batch: *sink_id*'s
    lease held, its ledger in the target (*backend*) bound and claimed, one transaction holding
    *row* prepared. Returns (the lease, the owner epoch, the prepared transaction's handle)."""
    lease = backend.acquire(sink_id)
    ledger = open_target_ledger(backend, sink_id, lease=lease)
    ledger.bind_sink_id(sink_id, sink_id)
    epoch = ledger.claim()
    txn = sink.begin_transaction(TransactionContext(sink_id, batch_id, 0, 1, 0))
    sink.invoke(txn, row)
    return lease, epoch, sink.pre_commit(txn)


def validated(sink_class: type[S], url: str, table: str, schema: pa.Schema | None = None, **kw: Any) -> S:
    """A sink of *sink_class* on *table*, validated for *schema* (default: :func:`batch`'s)."""
    sink = sink_class(url, table, **kw)  # type: ignore[call-arg]  # the SQL sinks take (url, table, **options)
    capability(sink, WriteSetup).validate(schema or batch([0]).schema)
    return sink


def password(url: str) -> str:
    """The password of the test server's URL (which must have one)."""
    pw = sa.make_url(url).password
    assert pw, "the test server must use a password"
    return pw


def chain(exc: BaseException) -> Iterator[BaseException]:
    """*exc* and every exception it was raised from or during."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__]


@contextlib.contextmanager
def fresh_sql_target(request: pytest.FixtureRequest) -> Iterator[tuple[str, type[Any], str, str]]:
    """(url, sink class, fresh table (id bigint primary key, s text, x double), fresh sink id)
    on the server ``request.param`` = (url fixture name, sink class) names; prepared
    transactions a failed test left are rolled back, the table dropped."""
    from twopc.sinks.sql import dispose_engines

    url_fixture, sink_class = request.param
    url = request.getfixturevalue(url_fixture)
    name, sink_id = f"t_{uid()}", f"s_{uid()}"
    engine = sa.create_engine(url)
    with engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, s TEXT, x DOUBLE PRECISION)")
    try:
        yield url, sink_class, name, sink_id
    finally:
        cleaner = sink_class(url, name)
        for h in cleaner.list_prepared(sink_id):
            cleaner.abort(h)
        cleaner.close()
        dispose_engines()
        with engine.begin() as c:
            c.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")
        engine.dispose()


def logged_markers(engine: sa.Engine, marker: str) -> str:
    """Create the PostgreSQL marker table *marker* (as twopc creates it) with a trigger that
    copies every marker row inserted into ``<marker>_log``, and return that table's name: how
    many transactions writes prepared, after they purged their own markers."""
    from twopc.sinks import PostgresSink

    log = f"{marker}_log"
    with engine.begin() as c:
        for stmt in PostgresSink(engine.url, "unused", marker_table=marker).dialect.marker_table_ddl():
            c.exec_driver_sql(stmt)
        c.exec_driver_sql(f"CREATE TABLE {log} (gid text, sink_id text)")
        c.exec_driver_sql(f"CREATE FUNCTION {log}_fn() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                          f"INSERT INTO {log} VALUES (NEW.gid, NEW.sink_id); RETURN NEW; END $$")
        c.exec_driver_sql(f"CREATE TRIGGER {log}_tr AFTER INSERT ON {marker} FOR EACH ROW EXECUTE FUNCTION {log}_fn()")
    return log
