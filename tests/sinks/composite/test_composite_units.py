"""The composite sink's own rules, without Spark: participants' projections and names, one
participant failing to prepare rolls the others of its attempt back (on a real PostgreSQL
whose deferred unique constraint fails the PREPARE), a participant whose commit may be refused
after the decision (twopc-jdbc staging) and two participants writing one table are refused on the
driver, and a decision covers the participant transactions ``list_prepared`` finds, also for a user's
sink whose ids are not Xids."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
import sqlalchemy as sa

from twopc import CommitLedger, ConfigurationError, Participant
from twopc import TransactionContext as Ctx
from twopc._composite import _group
from twopc._coordinator import classify_prepared
from twopc.sinks import FileSink, PostgresHandle
from twopc.spi.operations import Decision
from twopc.spi.runtime import CompositeHandle, CompositeSink

from tests._composite_helpers import composite_harness
from tests._filesink_helpers import assert_nothing_left, committed_ids
from tests._kit_harnesses import _pg_prepared, _read, _table

ROWS = pa.record_batch({"id": pa.array([1, 2, 3], pa.int64()), "payload": ["a", "b", "c"],
                        "amount": [0.5, 1.0, 1.5]})


def test_projection_keeps_renames_and_transforms(tmp_path: Path) -> None:
    sink = FileSink(str(tmp_path / "out"))
    renamed = Participant("p", sink, columns={"id": "order_id", "amount": "total"})
    assert renamed.project(ROWS).to_pydict() == {"order_id": [1, 2, 3], "total": [0.5, 1.0, 1.5]}
    derived = Participant("d", sink, columns=["amount"], batch_column="twopc_batch",
                          transform=lambda b: pa.record_batch({"sum": [sum(b.column(0).to_pylist())]}))
    assert derived.project(ROWS, 7).to_pydict() == {"sum": [3.0], "twopc_batch": [7]}
    with pytest.raises(ConfigurationError, match=r"participant 'p' keeps columns \['nope'\]"):
        Participant("p", sink, columns=["nope"]).project(ROWS)
    with pytest.raises(ConfigurationError, match="participant name 'a b'"):
        Participant("a b", sink)
    with pytest.raises(ConfigurationError, match=r"unique: \['p'\]"):
        CompositeSink([Participant("p", sink), Participant("p", sink)])


def test_a_failed_prepare_rolls_back_the_participants_already_prepared(postgres_url: str, tmp_path: Path) -> None:
    ddl = ("CREATE TABLE {name} (id bigint NOT NULL, payload text, amount double precision, "
           "UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)")
    out = tmp_path / "files"
    with _table(postgres_url, ddl) as (table, engine):
        from twopc.sinks import PostgresSink

        sink = CompositeSink([Participant("files", FileSink(str(out))),
                              Participant("orders", PostgresSink.from_options({"url": postgres_url,
                                                                               "dbtable": table}))])
        sink.configure_write(ROWS.schema, overwrite=False, streaming=True, checkpointed=True)
        sink.validate(ROWS.schema)
        txn = sink.begin_transaction(Ctx("unitfail", 0, 0, 1))
        sink.invoke_batch(txn, ROWS)
        sink.invoke_batch(txn, ROWS)  # the same ids twice: PREPARE TRANSACTION fails on the deferred unique key
        with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
            sink.pre_commit(txn)
        sink.close()
        assert_nothing_left(out, "unitfail.files")  # the file participant, prepared first, was rolled back
        assert _pg_prepared(engine, "unitfail.orders") == []
        assert committed_ids(out) == [] and sink.list_prepared("unitfail") == []


def test_a_decision_covers_participant_transactions_whose_ids_are_not_xids(tmp_path: Path) -> None:
    sid = "covered"
    mine = PostgresHandle("custom-1", f"{sid}.mine", 0, 0, 1)
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_sink_id(sid, default=sid)
    ledger.claim()
    ledger.record_decision(Decision(sid, 0, (CompositeHandle("twopc:covered:0:0:1:0badc0de", sid, 0, 0, 1,
                                                             (("mine", mine),)),)))
    found = _group(sid, [("mine", mine), ("mine", PostgresHandle("custom-2", f"{sid}.mine", 0, 1, 2))])
    assert [h.txn_id for h in found] == ["mine:custom-1", "mine:custom-2"]
    decided, orphans = classify_prepared(ledger, found, up_to_batch=None)
    assert [h.txn_id for h in decided] == ["mine:custom-1"] and [h.txn_id for h in orphans] == ["mine:custom-2"]


def test_participant_options_are_checked_up_front_and_named(postgres_url: str, redis_url: str) -> None:
    from twopc.sinks import OptionsCompositeSink

    with composite_harness(["orders", "events"], postgres_url=postgres_url, redis_url=redis_url) as harness:
        with pytest.raises(ConfigurationError, match="composite participant 'events' has no format"):
            OptionsCompositeSink.from_options({k: v for k, v in harness.options.items() if k != "events.format"})
        with pytest.raises(ConfigurationError, match=r"composite participant 'orders' \(twopc-postgres\): .*bogus"):
            OptionsCompositeSink.from_options({**harness.options, "orders.bogus": "1"})
        with pytest.raises(ConfigurationError, match="option targets is not valid JSON"):
            OptionsCompositeSink.from_options({"targets": "[{"})


def test_a_participant_whose_commit_may_be_refused_is_refused_before_any_task(postgres_url: str) -> None:
    """A ``twopc-jdbc`` staging participant checks its table's constraints only when the
    driver moves the rows, after the composite's decision: a refused move would leave a
    decided batch in the other targets and failing forever in this one. It is refused on
    the driver, named, with the fix, before its validation creates anything: by
    ``commitMode=staging``, and by the automatic choice (asking the server: here a missing
    table); a StagingSink given as a Python object too."""
    from twopc.sinks import OptionsCompositeSink, StagingSink

    with composite_harness(["orders", "staged"], postgres_url=postgres_url) as harness:
        engine = harness.engines[-1]
        password = harness.options["staged.password"]
        sink = OptionsCompositeSink.from_options(harness.options)
        with pytest.raises(ConfigurationError, match=r"composite participant 'staged' \(JDBC .*\(staging mode\)\) "
                                                     r"cannot join a composite: the staging mode checks") as err:
            sink.configure_write(ROWS.schema, overwrite=False, streaming=True, checkpointed=True)
        assert "commitMode=prepared" in str(err.value) and password not in str(err.value)

        auto = {k: v for k, v in harness.options.items() if k != "staged.commitMode"}
        auto["staged.dbtable"] = harness.options["staged.dbtable"] + "_missing"
        sink = OptionsCompositeSink.from_options(auto)
        with pytest.raises(ConfigurationError, match=r"composite participant 'staged'.*cannot join a composite"):
            sink.configure_write(ROWS.schema, overwrite=False, streaming=True, checkpointed=True)
        sink.close()
        stage = StagingSink(postgres_url, auto["staged.dbtable"]).stage
        assert not sa.inspect(engine).has_table(stage.name), "staging was prepared for a refused participant"
        staged = StagingSink(postgres_url, harness.options["staged.dbtable"])
        with pytest.raises(ConfigurationError, match="participant 'direct'"):
            CompositeSink([Participant("direct", staged)]).configure_write(
                ROWS.schema, overwrite=False, streaming=True, checkpointed=True)


def test_two_participants_writing_one_table_are_refused_when_the_write_is_planned(postgres_url: str) -> None:
    """Two participants on one table would wait for each other's locks until the lock
    timeout: refused before anything is written, naming both and the table, also when
    their URLs name the server differently (``localhost``) and the table in other case
    (the server's identity says they are one table)."""
    from twopc.sinks import OptionsCompositeSink

    with composite_harness(["orders"], postgres_url=postgres_url) as harness:
        o = harness.options
        table, engine = o["orders.dbtable"], harness.engines[0]
        copy = {k.replace("orders.", "copy."): v for k, v in o.items() if k.startswith("orders.")}
        alias = {"copy.url": o["orders.url"].replace("127.0.0.1", "localhost"), "copy.dbtable": table.upper()}
        for how, extra in (("same URL", {}), ("another name of the server", alias)):
            sink = OptionsCompositeSink.from_options({**o, **copy, **extra, "targets": "orders,copy"})
            with pytest.raises(ConfigurationError, match=r"composite participants 'orders' and 'copy' write the same "
                                                         rf"target \(postgresql .*table {table}[ )].*lock timeout.*"
                                                         r"one participant per table.*nothing was written") as err:
                sink.configure_write(ROWS.schema, overwrite=False, streaming=True, checkpointed=True)
            sink.close()
            assert o["orders.password"] not in str(err.value), how
        assert _read(engine, table) == [] and _pg_prepared(engine, "") == []


def test_a_participant_error_keeps_its_class_and_attributes_when_named(tmp_path: Path) -> None:
    """The composite prefixes a participant's error with its name (a commit that stopped at
    one target says which); the error keeps its class and attributes, also one whose
    constructor takes more than a message (callers tell a refused key from a lost server)."""
    from twopc._composite import _named
    from twopc.sinks import RedisTargetError
    from twopc.spi import SinkUnavailableError

    p = Participant("counters", FileSink(str(tmp_path / "out")))
    err = _named(p, RedisTargetError("key k is a Redis list", key="k", redis_type="list", op="INCRBY"), ", after x")
    assert isinstance(err, RedisTargetError) and (err.key, err.redis_type, err.op) == ("k", "list", "INCRBY")
    assert str(err).startswith("composite participant 'counters' (") and str(err).endswith(", after x: key k is "
                                                                                         "a Redis list")
    assert type(_named(p, SinkUnavailableError("no answer"))) is SinkUnavailableError


def test_a_composite_claims_its_sink_id_in_every_participant_and_names_the_one_owned_by_another(
        tmp_path: Path) -> None:
    a, b = FileSink(str(tmp_path / "a")), FileSink(str(tmp_path / "b"))
    assert b.claim_sink_id("orders.b", "/ck/other") is None  # another query owns participant b's sink id
    composite = CompositeSink([Participant("a", a), Participant("b", b)])
    other = composite.claim_sink_id("orders", "/ck/mine")
    assert other is not None and other.owner == "/ck/other"
    assert other.remove == f"(participant 'b') rm '{tmp_path / 'b' / '_twopc' / 'owners' / 'orders.b'}'"
    assert a.claim_sink_id("orders.a", "/ck/mine") is None  # participant a was claimed for this query
    assert composite.claim_sink_id("orders", "/ck/other") is not None
