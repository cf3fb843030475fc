"""The conformance kit on twopc-http's planted bugs: a sink that sends at prepare, and one
whose key changes from one try of a request to the next, each fail it against the reference
service (which loses the reply of every 5th request it applies), in the checks named here.
(The kit passes the correct sink: tests/kit/test_kit_sinks.py, harness ``http``.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from twopc.testing import ContractViolation, run_contract

from tests._kit_harnesses import HTTP_TOKEN, http_harness

pytestmark = pytest.mark.kit

#: The checks each planted bug must fail, at least.
CAUGHT = {
    "SendsAtPrepare": {"invisible_until_commit_then_exactly_once", "rolled_back_is_lost", "abort_is_idempotent",
                       "list_prepared_finds_exactly_the_prepared"},
    "KeyChangesOnRetry": {"invisible_until_commit_then_exactly_once", "commit_is_idempotent"},
}


@pytest.mark.parametrize("broken", sorted(CAUGHT))
def test_the_kit_fails_a_planted_bug(tmp_path: Path, broken: str) -> None:
    with http_harness(tmp_path, f"tests._broken_http_sinks:{broken}") as harness:
        report = run_contract(harness, sorted({*CAUGHT[broken], "handle_round_trips_without_credentials"}))
    print(report.render())  # shown with -rP: the lines the kit printed
    assert CAUGHT[broken] <= set(report.failed), report.render()
    assert isinstance(report.failed["invisible_until_commit_then_exactly_once"], ContractViolation)
    assert "handle_round_trips_without_credentials" in report.passed or broken == "SendsAtPrepare"
    assert HTTP_TOKEN not in report.render()
