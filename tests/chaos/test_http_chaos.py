"""twopc-http crashed at every fault point and through network faults, JVM-less (the schedules'
micro-batch job, ``python -m twopc.testing.microjob``: a restart costs an interpreter start), each
run checked from the reference service's own log: every row's effect applied exactly once, no key
applied twice, and no request seen for a transaction that no decision names.

- Every fault point of the protocol and twopc-http's own two (``http_before_ack``,
  ``http_before_delivered``), one crash of the job (driver and workers) per micro-batch, then two
  task workers killed (retried), while the service answers 500s, 429 and 503 with
  ``Retry-After`` and one slow answer (the client times out, its retry meets 409 in flight).
- The network: a lost reply (FaultProxy swallows it), connections reset in mid-delivery, a
  stalled downstream, the service crashed and down for a while.
- The log check catches a sink that sends at prepare.

(``make test``'s randomized schedules draw twopc-http too: tests/chaos/test_chaos_schedules.py.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from twopc.faultinject import FaultControl, FaultPlan, FaultProxy, FaultRule
from twopc.testing import FAULT_POINTS, Schedule, ScheduleResult, run_schedule

from tests._chaos_env import HTTP_POINTS
from tests._http_service import HttpService, undecided_requests
from tests._kit_harnesses import service_harness

pytestmark = pytest.mark.chaos

#: One crash per micro-batch at each point, in protocol order (during_recovery in the restart
#: after the after_decision crash), then two task workers killed in the last batch.
CRASHES = ["during_invoke", "before_pre_commit", "after_pre_commit", "before_decision", "after_decision",
           "http_before_ack", "between_commits", "http_before_delivered", "after_commit", "after_mark"]


@pytest.fixture
def service() -> Iterator[HttpService]:
    with HttpService() as s:
        yield s


def _check(service: HttpService, result: ScheduleResult, work: Path) -> None:
    assert result.ok, result.summary()
    assert undecided_requests(service, str(work / "ck")) == []
    assert all(n == 1 for n in service.applied.values())


def test_a_crash_at_every_fault_point_then_each_row_once(service: HttpService, tmp_path: Path) -> None:
    assert set(CRASHES) | {"during_recovery"} == set(FAULT_POINTS) | set(HTTP_POINTS)
    spec = [f"{p}@batch={b}:crash" for b, p in enumerate(CRASHES)]
    spec.insert(CRASHES.index("after_decision") + 1, f"during_recovery@batch={CRASHES.index('after_decision')}:crash")
    last = len(CRASHES)
    spec += [f"during_invoke@batch={last}@partition=0:kill", f"after_pre_commit@batch={last}@partition=1:kill"]
    schedule = Schedule(0, "http", last + 1, FaultPlan.parse(",".join(spec)).rules)
    service.fail(4)
    service.throttle(3, 429, "1")
    service.throttle(2, 503, "0")
    service.slow(1, 2.5)
    harness = service_harness(service, tmp_path / "outbox", timeout="2s", maxRetries="12", retryBackoffMax="400ms")
    result = run_schedule(harness, schedule, tmp_path / "run", rows_per_batch=6)
    _check(service, result, tmp_path / "run")
    assert result.fired["crash"] == len(CRASHES) + 1 and result.fired["kill"] == 2, result.summary()
    answers = {s.answer for s in service.log}
    assert {500, 429, 503, 409, 201} <= answers


def test_lost_replies_resets_stalls_and_a_crashed_service_then_each_row_once(service: HttpService,
                                                                             tmp_path: Path) -> None:
    rules = (
        FaultRule("after_decision", 0, None, "proxy", 1, "http", "swallow_reply", for_s=3.0, pattern="Idempotency"),
        FaultRule("http_before_ack", 1, None, "proxy", 1, "http", "reset"),
        FaultRule("after_decision", 2, None, "proxy", 1, "http", "blackhole", for_s=2.0, direction="downstream"),
        FaultRule("http_before_ack", 3, None, "server", 1, "http", "crash"),
        FaultRule("after_decision", 4, None, "server", 1, "http", "down", for_s=2.0),
        FaultRule("http_before_ack", 5, None, "crash"),
    )
    with FaultControl() as control, FaultProxy("127.0.0.1", service.port) as proxy:
        control.add_server("http", service).add_proxy("http", proxy)
        direct = service_harness(service, tmp_path / "outbox", timeout="2s", connectTimeout="1s", maxRetries="10",
                                 retryBackoff="100ms", retryBackoffMax="1s")
        harness = dataclasses.replace(direct, options={**direct.options,
                                                       "url": f"http://127.0.0.1:{proxy.port}/events/{{id}}"})
        result = run_schedule(harness, Schedule(1, "http", 6, rules), tmp_path / "run", env=control.env(),
                              settle=control.settle, rows_per_batch=6)
    _check(service, result, tmp_path / "run")
    assert sum(result.fired.values()) == len(rules), result.summary()


def test_the_log_check_catches_a_sink_that_sends_at_prepare(service: HttpService, tmp_path: Path) -> None:
    harness = service_harness(service, tmp_path / "outbox", "tests._broken_http_sinks:SendsAtPrepare")
    result = run_schedule(harness, Schedule(2, "http", 2, FaultPlan.parse("before_decision@batch=0:crash").rules),
                          tmp_path / "run", rows_per_batch=4)
    sent = undecided_requests(service, str(tmp_path / "run" / "ck"))
    assert sent, result.summary()
    assert {s.txn for s in sent} <= service.seen_transactions()
