"""twopc.testing: a conformance kit for your own :class:`twopc.TwoPhaseCommitSink`.

Give the kit a :class:`SinkHarness` (your sink or data source class, its Spark options, and a
function reading back the ids of the visible rows). It checks

- **the protocol contract** (:data:`CONTRACT_CHECKS`, no Spark): invisible until one commit shows each row exactly
  once; idempotent commit and abort; ``LOST`` for rolled-back and never-prepared transactions; abort of a committed
  one refused; ``list_prepared`` exact; handles survive their envelope without credentials; pickling; ``rollback``;
  and the real :class:`~twopc.CommitCoordinator` and :class:`~twopc.RecoveryCoordinator` through orphans, replays, a
  driver dying at each protocol edge, and a lost transaction;
- **the crash matrix through Spark** (:func:`run_crash_matrix`): a streaming query SIGKILLed at
  every point of :data:`FAULT_POINTS`, plus task kills, replays repartitioned; afterwards every
  id is visible exactly once and nothing is prepared or pending;
- **randomized fault schedules** (:func:`generate_schedule`, :func:`run_schedule`): seeded crashes, kills, server
  restarts and network faults (:class:`twopc.faultinject.FaultControl`) through ``python -m twopc.testing.microjob``,
  each followed by a model check; :func:`shrink_schedule` minimises a failing one, :class:`ChaosTable` reports a run.

Subclass :class:`SinkContractTests` and :class:`CrashMatrixTests` as ``Test...`` classes with a ``harness`` fixture
and pytest collects the inherited tests; the checks (``check_*``, :func:`run_contract`) are plain functions too
(docs/extending/conformance-kit.md). The sink must be importable by path; options reach the job in a 0600 file, and
no secret may reach a handle, message, stderr or the checkpoint. ``import twopc`` does not import this package."""

from .._faults import POINTS as FAULT_POINTS
from ._checks import (
    PROTOCOL_CHECKS,
    check_a_wrong_credential_never_shows_in_errors,
    check_abort_after_commit_is_refused,
    check_abort_is_idempotent,
    check_commit_is_idempotent,
    check_committable_from_a_restarted_driver,
    check_handle_round_trips_without_credentials,
    check_invisible_until_commit_then_exactly_once,
    check_list_prepared_finds_exactly_the_prepared,
    check_never_prepared_is_lost,
    check_rollback_leaves_nothing,
    check_rolled_back_is_lost,
    check_sink_pickles_after_use,
)
from ._coordination import (
    COORDINATOR_CHECKS,
    DRIVER_CRASH_POINTS,
    check_coordinator_commits_sweeps_and_ignores_replays,
    check_driver_crash_then_recovery_is_exactly_once,
    check_lost_transaction_is_loud,
)
from ._crash import (
    DEFAULT_SPARK_CONF,
    EXECUTOR_POINTS,
    CrashMatrixResult,
    Fault,
    cluster_crash_plan,
    crash_plan,
    run_crash_matrix,
)
from ._harness import (
    DEFAULT_SCHEMA,
    ContractViolation,
    HarnessError,
    SinkHarness,
    default_rows,
    derive_secrets,
    fresh_nonce,
)
from ._randomized import ChaosTable, ScheduleResult, run_schedule
from ._report import CONTRACT_CHECKS, ContractReport, run_contract
from ._schedules import FAULT_KINDS, Schedule, ScheduleTarget, generate_schedule, shrink_schedule
from ._suites import CrashMatrixTests, SinkContractTests

__all__ = ["CONTRACT_CHECKS", "COORDINATOR_CHECKS", "DEFAULT_SCHEMA", "DEFAULT_SPARK_CONF", "DRIVER_CRASH_POINTS",
           "EXECUTOR_POINTS", "FAULT_KINDS", "FAULT_POINTS", "PROTOCOL_CHECKS", "ChaosTable", "ContractReport",
           "ContractViolation", "CrashMatrixResult", "CrashMatrixTests", "Fault", "HarnessError", "Schedule",
           "ScheduleResult", "ScheduleTarget", "SinkContractTests", "SinkHarness",
           "check_a_wrong_credential_never_shows_in_errors", "check_abort_after_commit_is_refused",
           "check_abort_is_idempotent", "check_commit_is_idempotent", "check_committable_from_a_restarted_driver",
           "check_coordinator_commits_sweeps_and_ignores_replays", "check_driver_crash_then_recovery_is_exactly_once",
           "check_handle_round_trips_without_credentials", "check_invisible_until_commit_then_exactly_once",
           "check_list_prepared_finds_exactly_the_prepared", "check_lost_transaction_is_loud",
           "check_never_prepared_is_lost", "check_rollback_leaves_nothing", "check_rolled_back_is_lost",
           "check_sink_pickles_after_use", "cluster_crash_plan", "crash_plan", "default_rows", "derive_secrets",
           "fresh_nonce", "generate_schedule", "run_contract", "run_crash_matrix", "run_schedule", "shrink_schedule"]
