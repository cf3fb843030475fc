"""The conformance kit itself: it passes a correct sink, fails each deliberately broken sink
(``_broken_sinks.py``) in exactly the checks that sink breaks, every check fails some
broken sink (a check that cannot fail is a defect), and pytest collects the inherited
tests of its base classes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import twopc
from twopc.sinks import FileHandle, FileSink
from twopc.testing import (
    CONTRACT_CHECKS,
    ContractViolation,
    Fault,
    HarnessError,
    SinkHarness,
    crash_plan,
    derive_secrets,
    fresh_nonce,
    run_contract,
)

from tests import _broken_sinks as broken
from tests._broken_sinks import SECRET, harness_on
from tests._paths import REPO_ROOT

pytest_plugins = ("pytester",)

ROOT = REPO_ROOT


def crashes(*points: str) -> set[str]:
    return {f"driver_crash_then_recovery_is_exactly_once[{p}]" for p in points}


ALL_CRASHES = crashes("before_decision", "after_decision", "between_commits", "after_commit", "after_mark",
                      "during_recovery")

#: Each broken sink and the checks that must fail for it: no more, no less.
EXPECTED: dict[type[FileSink], set[str]] = {
    broken.CommitNotIdempotent: {"commit_is_idempotent", "abort_after_commit_is_refused",
                                 *crashes("between_commits", "after_commit")},
    broken.MarkerMissing: {"commit_is_idempotent", "abort_after_commit_is_refused",
                           *crashes("between_commits", "after_commit")},
    broken.NeverAlreadyCommitted: {"commit_is_idempotent", "abort_after_commit_is_refused"},
    broken.LostIsHidden: {"rolled_back_is_lost", "never_prepared_is_lost", "abort_is_idempotent",
                          "lost_transaction_is_loud"},
    broken.AbortIgnoresPreparedState: {
        "rolled_back_is_lost", "abort_is_idempotent", "abort_after_commit_is_refused",
        "list_prepared_finds_exactly_the_prepared", "handle_round_trips_without_credentials",
        "coordinator_commits_sweeps_and_ignores_replays", "lost_transaction_is_loud", *ALL_CRASHES},
    broken.AbortUndoesCommit: {"abort_after_commit_is_refused"},
    broken.AbortNotIdempotent: {"abort_is_idempotent", "abort_after_commit_is_refused"},
    broken.ListsEveryone: {"list_prepared_finds_exactly_the_prepared",
                           "coordinator_commits_sweeps_and_ignores_replays"},
    broken.ListsNothing: {"list_prepared_finds_exactly_the_prepared", "never_prepared_is_lost",
                          "handle_round_trips_without_credentials",
                          "coordinator_commits_sweeps_and_ignores_replays", *ALL_CRASHES},
    broken.HandleCarriesPassword: {"handle_round_trips_without_credentials"},
    broken.ErrorShowsPassword: {"a_wrong_credential_never_shows_in_errors"},
    broken.UnpicklableAfterUse: {"sink_pickles_after_use"},
    broken.CloseRollsBackPrepared: {"committable_from_a_restarted_driver"},
    broken.VisibleBeforeCommit: {
        "invisible_until_commit_then_exactly_once", "rolled_back_is_lost", "never_prepared_is_lost",
        "abort_is_idempotent", "list_prepared_finds_exactly_the_prepared",
        "coordinator_commits_sweeps_and_ignores_replays", "lost_transaction_is_loud", *ALL_CRASHES},
    broken.RollbackPrepares: {"rollback_leaves_nothing"},
    broken.ClaimsAtomicCommit: crashes("after_decision", "during_recovery"),
}


def test_a_correct_sink_passes_every_check(tmp_path: Path) -> None:
    report = run_contract(harness_on(FileSink, tmp_path / "out"))
    assert report.ok, report.render()
    assert report.passed == list(CONTRACT_CHECKS)


@pytest.mark.parametrize("sink", list(EXPECTED), ids=lambda s: s.__name__)
def test_the_kit_fails_a_broken_sink_in_exactly_the_checks_it_breaks(tmp_path: Path, sink: type[FileSink]) -> None:
    report = run_contract(harness_on(sink, tmp_path / "out"))
    assert set(report.failed) == EXPECTED[sink], report.render()
    for name, exc in report.failed.items():
        assert isinstance(exc, ContractViolation) and exc.check.split("[")[0] == name.split("[")[0], (name, exc)
        assert SECRET not in str(exc)  # failure messages are redacted too


def test_every_check_fails_for_some_broken_sink() -> None:
    never_failed = set(CONTRACT_CHECKS) - set().union(*EXPECTED.values())
    assert not never_failed, f"checks no broken sink fails (they could be unable to fail): {never_failed}"
    assert set(EXPECTED) == set(broken.BROKEN)


def test_failure_messages_say_what_broke(tmp_path: Path) -> None:
    report = run_contract(harness_on(broken.MarkerMissing, tmp_path / "out"), ["commit_is_idempotent"])
    assert "a second commit of a committed transaction: commit answered LOST, expected ALREADY_COMMITTED" \
        in str(report.failed["commit_is_idempotent"])
    report = run_contract(harness_on(broken.HandleCarriesPassword, tmp_path / "o2"),
                          ["handle_round_trips_without_credentials"])
    assert "contains a credential" in str(report.failed["handle_round_trips_without_credentials"])
    report = run_contract(harness_on(broken.UnpicklableAfterUse, tmp_path / "o3"), ["sink_pickles_after_use"])
    assert "cannot be pickled with pickle after use (TypeError" in str(report.failed["sink_pickles_after_use"])


def test_import_twopc_does_not_import_the_kit_or_pytest() -> None:
    code = ("import sys, twopc, sinks, recovery\n"
            "bad = [m for m in ('twopc.testing', 'pytest', '_pytest') if m in sys.modules]\n"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_derive_secrets_finds_passwords_in_options_and_urls() -> None:
    found = derive_secrets({"url": "jdbc:postgresql://h:5432/db?user=app&password=p%40ss-word",
                            "PASSWORD": "hunter22", "mapping": '[{"op": "INCRBY"}]', "dbtable": "t",
                            "sa": "postgresql+psycopg://app:in-url-pw@db/x", "apiToken": "tok-123456"})
    assert {"p@ss-word", "p%40ss-word", "hunter22", "in-url-pw", "tok-123456"} <= set(found)
    assert not {"app", "t", "db"} & set(found)


def test_fresh_nonce_keeps_the_xid_form_and_refuses_other_ids() -> None:
    canonical = FileHandle("twopc:q1:3:0:7:0a1b2c3d", "q1", 3, 0, 7)
    path = FileHandle("q1~3~0~7~0a1b2c3d", "q1", 3, 0, 7)
    for h, prefix in ((canonical, "twopc:q1:3:0:7:"), (path, "q1~3~0~7~")):
        ghost = fresh_nonce(h)
        assert ghost.txn_id.startswith(prefix) and ghost.txn_id != h.txn_id
        assert ghost.txn_id[len(prefix):] != "0a1b2c3d" and ghost.rows == h.rows
    with pytest.raises(HarnessError, match="never_prepared"):
        fresh_nonce(FileHandle("file-7", "q1", 3, 0, 7))


def test_a_sink_that_cannot_be_imported_by_path_is_refused_with_the_reason() -> None:
    local = type("LocalSink", (FileSink,), {"__module__": "__main__"})
    with pytest.raises(HarnessError, match="cloudpickle ships such classes by value"):
        SinkHarness(local, {}, list).sink_path()

    def make() -> type[FileSink]:
        class Nested(FileSink):
            pass
        return Nested

    with pytest.raises(HarnessError, match="importable module"):
        SinkHarness(make(), {}, list).sink_path()
    with pytest.raises(HarnessError, match="cannot import"):
        SinkHarness("sinks:NoSuchSink", {}, list).sink_path()
    assert SinkHarness(FileSink, {}, list).sink_path() == f"{FileSink.__module__}:FileSink"


def test_the_harness_never_shows_its_options() -> None:
    h = SinkHarness("sinks:FileSink", {"path": "/x", "password": SECRET}, list, name="files")
    assert SECRET not in repr(h) and SECRET not in str(h)


def test_crash_plans_reach_every_fault_point_and_kill_last() -> None:
    per_txn, atomic = crash_plan(atomic=False), crash_plan(atomic=True)
    one_call = crash_plan(atomic=False, one_call=True)
    assert {f.point for f in per_txn if f.action == "crash"} == set(twopc.FAULT_POINTS)
    assert {f.point for f in atomic if f.action == "crash"} == set(twopc.FAULT_POINTS) - {
        "between_commits", "after_commit"}
    assert {f.point for f in one_call if f.action == "crash"} == set(twopc.FAULT_POINTS) - {"between_commits"}
    for plan in (per_txn, atomic, one_call):
        batches = [f.batch for f in plan if f.action == "crash" and f.point != "during_recovery"]
        assert batches == list(range(len(batches))), "one crash per micro-batch"
        kills = [f for f in plan if f.action == "kill"]
        assert {f.partition for f in kills} == {0, 1} and {f.batch for f in kills} == {len(batches)}
        assert plan[-2:] == kills, "nothing may follow the kills"


def test_fault_firing_lines_are_matched_by_point_action_and_batch() -> None:
    line = "faultinject: firing after_decision (crash) batch=4 pid=12"
    assert Fault("after_decision", 4).fired_in([line])
    assert not Fault("after_decision", 14).fired_in([line])
    assert not Fault("after_decision", 4, "kill").fired_in([line])
    assert Fault("during_recovery", None).fired_in(["faultinject: firing during_recovery (crash) batch=None pid=1"])


INHERITED = '''
import pyarrow.parquet as pq
import pytest

from twopc.sinks import FileSink
from twopc.testing import SinkContractTests, SinkHarness


def make(sink, out):
    def read_ids():
        ids = []
        for path in FileSink.from_options({"path": str(out)}).committed_files():
            t = pq.read_table(path)
            ids += t.column("id").to_pylist() if t.num_columns else []
        return ids
    return SinkHarness(sink, {"path": str(out)}, read_ids)


class TestFileSink(SinkContractTests):
    @pytest.fixture
    def harness(self, tmp_path):
        return make("sinks:FileSink", tmp_path / "out")


class TestMarkerMissing(SinkContractTests):
    @pytest.fixture
    def harness(self, tmp_path):
        return make("tests._broken_sinks:MarkerMissing", tmp_path / "out")


class TestWithoutHarness(SinkContractTests):
    pass
'''


def test_pytest_collects_the_inherited_checks_and_reports_the_broken_ones(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user_sink=INHERITED)
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "-k", "not TestWithoutHarness", "-rf")
    n = len(CONTRACT_CHECKS)
    result.assert_outcomes(passed=2 * n - 4, failed=4)
    result.stdout.fnmatch_lines(["FAILED *TestMarkerMissing::test_commit_is_idempotent*"])
    result.stdout.fnmatch_lines([("E *ContractViolation: ?commit_is_idempotent? *: a second commit of a committed "
                                  "transaction: commit answered LOST, expected ALREADY_COMMITTED")])
    assert "TestFileSink::" not in "\n".join(line for line in result.outlines if line.startswith("FAILED"))
    missing = pytester.runpytest("-q", "-p", "no:cacheprovider", "-k",
                                 "TestWithoutHarness and test_commit_is_idempotent")
    missing.assert_outcomes(errors=1)
    missing.stdout.fnmatch_lines(["*fixture 'harness' not found*"])
