"""The protocol checks: what :class:`twopc.TwoPhaseCommitSink` promises, one check each.

Every check builds its sink with :meth:`SinkHarness.new_sink`, writes rows of ids no other check uses, drives the
sink the way the coordinator does (``commit_all`` first, else ``commit`` per handle), reads the target back with
``read_ids``, and ends by verifying that nothing of its sink ids is left prepared. A check passes or raises
:class:`ContractViolation` naming what broke.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import uuid
from collections.abc import Callable

from .._errors import HandleError, ProtocolError
from .._handle import decode_handle, dumps_handle, encode_handle, loads_handle
from .._sink import CommitOutcome
from ._harness import HarnessError, SinkHarness
from ._run import CheckRun, few

__all__ = ["PROTOCOL_CHECKS", "check_a_wrong_credential_never_shows_in_errors", "check_abort_after_commit_is_refused",
           "check_abort_is_idempotent", "check_commit_is_idempotent", "check_committable_from_a_restarted_driver",
           "check_handle_round_trips_without_credentials", "check_invisible_until_commit_then_exactly_once",
           "check_list_prepared_finds_exactly_the_prepared", "check_never_prepared_is_lost",
           "check_rollback_leaves_nothing", "check_rolled_back_is_lost", "check_sink_pickles_after_use"]

COMMITTED, ALREADY, LOST = CommitOutcome.COMMITTED, CommitOutcome.ALREADY_COMMITTED, CommitOutcome.LOST


def check_invisible_until_commit_then_exactly_once(harness: SinkHarness) -> None:
    """Guarantees: rows of prepared transactions are invisible; one commit of the batch makes every row visible
    exactly once, whether it came through ``invoke_batch`` or ``invoke`` (the per-row path)."""
    with CheckRun(harness, "invisible_until_commit_then_exactly_once") as run:
        sid = run.sink_id()
        a, b = run.ids(5), run.ids(5)
        handles = [run.prepare(sid, 0, 0, a), run.prepare(sid, 0, 1, b, by_row=True)]
        if run.visible():
            run.fail(f"ids {few(run.visible())} are visible while their transactions are only prepared")
        run.expect_outcome(handles, COMMITTED, "the first commit of a prepared batch")
        run.expect_visible(a + b, "after the commit")


def check_commit_is_idempotent(harness: SinkHarness) -> None:
    """Guarantees: committing a committed transaction again (``commit``, ``recover_and_commit``, a handle read back
    from its envelope, a restarted driver) answers ``ALREADY_COMMITTED`` and changes nothing."""
    with CheckRun(harness, "commit_is_idempotent") as run:
        sid = run.sink_id()
        ids = run.ids(5)
        h = run.prepare(sid, 0, 0, ids)
        run.expect_outcome([h], COMMITTED, "the first commit")
        run.expect_outcome([h], ALREADY, "a second commit of a committed transaction")
        run.expect_outcome([h], ALREADY, "recovery re-committing a committed transaction", recovering=True)
        restarted = run.new_sink()
        run.expect_outcome([loads_handle(dumps_handle(h))], ALREADY,
                           "a restarted driver re-committing the handle read back from the ledger",
                           sink=restarted, recovering=True)
        run.expect_visible(ids, "after one commit and three replays")


def check_committable_from_a_restarted_driver(harness: SinkHarness) -> None:
    """Guarantees: a prepared transaction survives closing the sink that prepared it and is committed by a sink built
    from the options alone, with the handle read back from its envelope (what a restarted driver has)."""
    with CheckRun(harness, "committable_from_a_restarted_driver") as run:
        sid = run.sink_id()
        ids = run.ids(5)
        envelope = dumps_handle(run.prepare(sid, 0, 0, ids))
        run.sink.close()
        restarted = run.new_sink()
        run.expect_outcome([loads_handle(envelope)], COMMITTED,
                           "committing from a new sink after the preparing one was closed",
                           sink=restarted, recovering=True)
        run.expect_visible(ids, "after the restarted driver's commit")


def check_rolled_back_is_lost(harness: SinkHarness) -> None:
    """Guarantees: committing a transaction that was rolled back answers ``LOST`` (or raises
    ``TransactionLostError``) and makes nothing visible: lost data is never reported as committed."""
    with CheckRun(harness, "rolled_back_is_lost") as run:
        sid = run.sink_id()
        h = run.prepare(sid, 0, 0, run.ids(5))
        run.sink.abort(h)
        run.expect_outcome([h], LOST, "committing a rolled-back transaction")
        run.expect_outcome([h], LOST, "recovery committing a rolled-back transaction", recovering=True)
        run.expect_visible([], "after committing a rolled-back transaction")


def check_never_prepared_is_lost(harness: SinkHarness) -> None:
    """Guarantees: committing a transaction that was never prepared (the harness's
    ``never_prepared``: by default a prepared handle's Xid with a fresh nonce) answers
    ``LOST`` and touches nothing else: the real transaction stays prepared and commits."""
    with CheckRun(harness, "never_prepared_is_lost") as run:
        sid = run.sink_id()
        ids = run.ids(5)
        h = run.prepare(sid, 0, 0, ids)
        ghost = harness.never_prepared(h)
        if ghost.txn_id == h.txn_id:
            raise HarnessError("never_prepared returned a handle with the prepared transaction's txn_id")
        run.expect_outcome([ghost], LOST, "committing a transaction that was never prepared")
        run.expect_outcome([ghost], LOST, "recovery committing a never-prepared transaction", recovering=True)
        listed = run.listed(sid)
        if set(listed) != {h.txn_id}:
            run.fail(f"after committing a never-prepared handle, list_prepared shows {few(listed)} instead of "
                     f"the one prepared transaction {h.txn_id!r}")
        run.expect_visible([], "after committing a never-prepared transaction")
        run.expect_outcome([h], COMMITTED, "the real transaction's commit")
        run.expect_visible(ids, "after the real transaction's commit")


def check_abort_is_idempotent(harness: SinkHarness) -> None:
    """Guarantees: ``abort`` of a rolled-back or never-prepared transaction succeeds quietly,
    from the sink that prepared it and from a restarted driver's; an aborted transaction is no longer listed, and
    committing it answers ``LOST``."""
    with CheckRun(harness, "abort_is_idempotent") as run:
        sid = run.sink_id()
        h = run.prepare(sid, 0, 0, run.ids(5))
        run.sink.abort(h)
        if h.txn_id in run.listed(sid):
            run.fail(f"abort({h.txn_id!r}) returned, but list_prepared still lists it")
        again = (("abort", run.sink.abort, h), ("a restarted driver's abort", run.new_sink().abort, h),
                 ("abort of a never-prepared transaction", run.sink.abort, harness.never_prepared(h)))
        for what, abort, handle in again:
            try:
                abort(handle)
            except Exception as exc:  # noqa: BLE001 - any error here is the finding
                run.fail(f"{what} of a transaction that is already gone raised {type(exc).__name__}: "
                         f"{str(exc)[:300]} (abort must be idempotent)")
        run.expect_outcome([h], LOST, "committing an aborted transaction")
        run.expect_visible([], "after aborting")


def check_abort_after_commit_is_refused(harness: SinkHarness) -> None:
    """Guarantees: ``abort`` of a committed transaction (by the sink that committed it or a restarted driver's)
    raises ``ProtocolError`` and undoes nothing. A sink that commits whole batches in one local transaction
    (``CommitShape.LOCAL_TRANSACTION``) cannot tell a committed attempt from an uncommitted replay of its batch, so
    it may return quietly instead, but must still undo nothing."""
    with CheckRun(harness, "abort_after_commit_is_refused") as run:
        sid = run.sink_id()
        ids = run.ids(5)
        h = run.prepare(sid, 0, 0, ids)
        run.expect_outcome([h], COMMITTED, "the first commit")
        atomic = run.atomic([h])
        for name, abort in (("abort", run.sink.abort), ("a restarted driver's abort", run.new_sink().abort)):
            try:
                abort(h)
            except ProtocolError as exc:
                run.clean(str(exc), f"the ProtocolError of {name}")
            except Exception as exc:  # noqa: BLE001 - any other error is the finding
                run.fail(f"{name} of a committed transaction raised {type(exc).__name__}: {str(exc)[:300]}, "
                         f"not ProtocolError")
            else:
                if not atomic:
                    run.fail(f"{name} of a committed transaction returned quietly: it must raise ProtocolError "
                             f"(the coordinator relies on it to never roll back a decided transaction unnoticed)")
            run.expect_visible(ids, f"after {name} of a committed transaction")
        run.expect_outcome([h], ALREADY, "committing again after the refused abort")


def check_list_prepared_finds_exactly_the_prepared(harness: SinkHarness) -> None:
    """Guarantees: ``list_prepared(sink_id[, batch_id])`` returns exactly the prepared transactions of that sink id
    (and batch), with their batch, partition and attempt; sink ids that look alike (``k_x`` vs ``kXx``: ``_`` is a
    LIKE wildcard; ``k_x`` vs ``k_xx``) are kept apart; a listed handle can be committed and aborted (recovery only
    has those); other sinks' transactions are untouched."""
    with CheckRun(harness, "list_prepared_finds_exactly_the_prepared") as run:
        u = uuid.uuid4().hex[:10]
        a, look_alike, longer = run.sink_id(f"k_{u}"), run.sink_id(f"kX{u}"), run.sink_id(f"k_{u}x")
        keep = run.ids(4)
        a10 = run.prepare(a, 1, 0, run.ids(2))
        a11 = run.prepare(a, 1, 1, run.ids(2))
        a20 = run.prepare(a, 2, 0, keep)
        other = [run.prepare(look_alike, 1, 0, run.ids(2)), run.prepare(longer, 1, 0, run.ids(2))]
        def expect(sid: str, batch: int | None, want: set[str]) -> None:
            got = set(run.listed(sid, batch))
            if got != want:
                run.fail(f"list_prepared({sid!r}{'' if batch is None else f', {batch}'}) returned {few(got)}, "
                         f"expected {few(want)}")
        expect(a, None, {a10.txn_id, a11.txn_id, a20.txn_id})
        expect(a, 1, {a10.txn_id, a11.txn_id})
        expect(a, 2, {a20.txn_id})
        expect(a, 7, set())
        expect(look_alike, None, {other[0].txn_id})
        expect(longer, None, {other[1].txn_id})
        expect(f"nobody{u}", None, set())
        listed = run.listed(a)
        for h in (a10, a11, a20):
            got = listed[h.txn_id]
            if (got.batch_id, got.partition_id, got.attempt_id) != (h.batch_id, h.partition_id, h.attempt_id):
                run.fail(f"list_prepared rebuilt {h.txn_id!r} as batch/partition/attempt "
                         f"{(got.batch_id, got.partition_id, got.attempt_id)}, expected "
                         f"{(h.batch_id, h.partition_id, h.attempt_id)}")
        run.expect_outcome([listed[a20.txn_id]], COMMITTED, "committing a handle list_prepared returned",
                           recovering=True)
        expect(a, None, {a10.txn_id, a11.txn_id})
        for h in (listed[a10.txn_id], listed[a11.txn_id]):
            run.sink.abort(h)
        expect(a, None, set())
        expect(look_alike, None, {other[0].txn_id})
        expect(longer, None, {other[1].txn_id})
        for h in other:
            run.sink.abort(h)
        run.expect_visible(keep, "after committing one listed batch and aborting the rest")


def check_handle_round_trips_without_credentials(harness: SinkHarness) -> None:
    """Guarantees: a handle (prepared or listed) survives its versioned JSON envelope
    (``encode_handle``/``decode_handle``, ``dumps_handle``/``loads_handle``) unchanged,
    and neither it, its ``repr``, nor the sink's ``describe()`` contains a credential."""
    with CheckRun(harness, "handle_round_trips_without_credentials") as run:
        sid = run.sink_id()
        h = run.prepare(sid, 0, 0, run.ids(3))
        if (listed := run.listed(sid).get(h.txn_id)) is None:
            run.fail(f"list_prepared does not list the prepared {h.txn_id!r}")
        for what, handle in (("the prepared handle", h), ("the listed handle", listed)):
            try:
                envelope = encode_handle(handle)
            except HandleError as exc:
                run.fail(f"{what} has no envelope: {exc}")
            if not (isinstance(envelope["kind"], str) and envelope["kind"] and isinstance(envelope["version"], int)
                    and envelope["version"] >= 1):
                run.fail(f"{what}'s envelope has kind {envelope['kind']!r} and version {envelope['version']!r}")
            try:
                text = json.dumps(envelope)
            except (TypeError, ValueError) as exc:
                run.fail(f"{what}'s payload is not JSON: {exc}")
            if decode_handle(json.loads(text)) != handle or loads_handle(dumps_handle(handle)) != handle:
                run.fail(f"{what} changes through its envelope: {handle!r:.200}")
            run.clean(dumps_handle(handle), f"{what}'s envelope")
            run.clean(repr(handle), f"repr() of {what}")
        run.clean(run.sink.describe(), "the sink's describe()")
        run.clean(repr(run.sink), "repr() of the sink")
        run.sink.abort(h)


def check_sink_pickles_after_use(harness: SinkHarness) -> None:
    """Guarantees: a sink that has been used (connections open) pickles with ``pickle``
    and with Spark's cloudpickle; the copy commits a transaction the original prepared
    and runs transactions of its own, and the original keeps working."""
    with CheckRun(harness, "sink_pickles_after_use") as run:
        sid = run.sink_id()
        first, pending, own, late = run.ids(2), run.ids(2), run.ids(2), run.ids(2)
        run.expect_outcome([run.prepare(sid, 0, 0, first)], COMMITTED, "a commit before pickling")
        h = run.prepare(sid, 1, 0, pending)
        run.listed(sid)
        copies = []
        from pyspark import cloudpickle
        for name, dumps in (("pickle", pickle.dumps), ("cloudpickle", cloudpickle.dumps)):
            try:
                data = dumps(run.sink)
            except Exception as exc:  # noqa: BLE001 - any failure to pickle is the finding
                run.fail(f"the sink cannot be pickled with {name} after use ({type(exc).__name__}: "
                         f"{str(exc)[:200]}): keep connections out of its pickled state")
            copies.append(run.adopt(pickle.loads(data)))
        run.expect_outcome([h], COMMITTED, "the unpickled copy committing what the original prepared",
                           sink=copies[0])
        run.expect_outcome([run.prepare(sid, 2, 0, own, sink=copies[-1])], COMMITTED,
                           "the unpickled copy's own transaction", sink=copies[-1])
        run.expect_outcome([run.prepare(sid, 3, 0, late)], COMMITTED, "the original after pickling")
        run.expect_visible(first + pending + own + late, "after commits by the original and its copies")


def check_rollback_leaves_nothing(harness: SinkHarness) -> None:
    """Guarantees: ``rollback`` of an open transaction (with rows, or none) leaves nothing
    visible and nothing listed, may be repeated, and the sink stays usable."""
    with CheckRun(harness, "rollback_leaves_nothing") as run:
        sid = run.sink_id()
        for partition, ids in ((0, run.ids(5)), (1, [])):
            txn = run.sink.begin_transaction(run.context(sid, 0, partition))
            if ids:
                run.sink.invoke_batch(txn, harness.rows(ids))
            run.sink.rollback(txn)
            run.sink.rollback(txn)
        if run.listed(sid):
            run.fail(f"rolled-back open transactions are listed as prepared: {few(run.listed(sid))}")
        run.expect_visible([], "after rolling back open transactions")
        ids = run.ids(3)
        run.expect_outcome([run.prepare(sid, 1, 0, ids)], COMMITTED, "a commit after the rollbacks")
        run.expect_visible(ids, "after the commit that followed the rollbacks")


def check_a_wrong_credential_never_shows_in_errors(harness: SinkHarness) -> None:
    """Guarantees: with every credential of the options replaced by a wrong one, whatever error building, validating
    or using the sink raises (and every exception it chains) shows neither the wrong credential nor the right one. A
    target that accepts the wrong credential (no authentication) raises nothing, and there is nothing to show."""
    with CheckRun(harness, "a_wrong_credential_never_shows_in_errors") as run:
        sid = run.sink_id()
        if not run.secrets:
            return
        wrong = f"Wr0ng{uuid.uuid4().hex[:12]}"
        options = {}
        for key, value in harness.options.items():
            for secret in run.secrets:
                value = value.replace(secret, wrong)
            options[key] = value
        bad = dataclasses.replace(harness, options=options, secrets=[*run.secrets, wrong])
        try:
            sink = run.adopt(bad.new_sink())
            txn = sink.begin_transaction(run.context(sid, 0, 0))
            sink.rollback(txn)
        except Exception as exc:  # noqa: BLE001 - the error itself is what is checked
            for e in _chain(exc):
                for text in (str(e), repr(e)):
                    if wrong in text or any(s in text for s in run.secrets):
                        run.fail(f"{type(e).__name__} raised with a wrong credential shows a credential: keep "
                                 f"passwords out of error messages")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is not None and all(e is not s for s in seen):
            seen.append(e)
            todo += [e.__cause__, e.__context__]
    return seen


PROTOCOL_CHECKS: dict[str, Callable[[SinkHarness], None]] = {check.__name__.removeprefix("check_"): check for check in (
    check_invisible_until_commit_then_exactly_once, check_commit_is_idempotent,
    check_committable_from_a_restarted_driver, check_rolled_back_is_lost, check_never_prepared_is_lost,
    check_abort_is_idempotent, check_abort_after_commit_is_refused, check_list_prepared_finds_exactly_the_prepared,
    check_handle_round_trips_without_credentials, check_sink_pickles_after_use, check_rollback_leaves_nothing,
    check_a_wrong_credential_never_shows_in_errors)}
"""Every protocol check by name, in the order a report lists them."""
