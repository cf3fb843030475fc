"""twopc.testing: a conformance kit for your own :class:`twopc.TwoPhaseCommitSink`.

Give the kit a :class:`SinkHarness`: your sink (or data source) class, the Spark options
that configure it, and a function that reads back the ids of the rows visible in the
target. It then checks

- **the protocol contract** (:data:`CONTRACT_CHECKS`, no Spark): prepared rows are
  invisible and one commit shows each exactly once; commit is idempotent
  (``ALREADY_COMMITTED``); rolled-back and never-prepared transactions are ``LOST``;
  abort is idempotent and refuses a committed transaction (``ProtocolError``);
  ``list_prepared`` finds exactly the prepared ones of a sink id and batch; handles
  survive their envelope and carry no credentials, nor does an error raised with a wrong
  password; the sink pickles after use and its copy works; ``rollback`` leaves nothing;
  and the real :class:`~twopc.CommitCoordinator` and :class:`~twopc.RecoveryCoordinator`
  drive it through orphans, replays, a driver dying at each protocol edge, and a lost
  transaction (loud);
- **the crash matrix through Spark** (:func:`run_crash_matrix`): a streaming query into
  the sink, in a subprocess (``python -m twopc.testing.job``), SIGKILLed at every point
  of ``twopc.FAULT_POINTS``, plus task kills Spark retries, with every replay
  repartitioned; afterwards every input id is visible exactly once, nothing is prepared
  and the ledger has nothing pending.

How you run it — base classes, not a plugin. Subclass :class:`SinkContractTests` and
:class:`CrashMatrixTests` as ``Test...`` classes with a ``harness`` fixture, and pytest
collects the inherited tests (the pattern of zarr's ``StoreTests``). Compared with a
pytest plugin (entry point or ``pytest_plugins``), this needs no registration and
changes nothing for tests that do not ask for it; several sinks (or configurations of
one) live side by side as classes in one module, each with its own fixture built from
the project's existing server fixtures; marks (``slow``, ``chaos``) and ``-k`` work per
class as usual; and the checks stay plain functions (``check_*``, :func:`run_contract`)
that a script or notebook can call without pytest. The base class names do not start
with ``Test``, so importing them into a test module collects nothing by itself.

Your sink must be importable by path (``package.module:Class``): the crash matrix's job
and Spark's Python workers are other processes, and cloudpickle ships classes defined in
``__main__`` or a notebook by value (hooks such as ``__init_subclass__`` do not run
there). Options reach the job in a 0600 file, never on a command line; the kit checks
that no secret of them reaches a handle, a description, an error message, the job's
stderr or the checkpoint.

- **randomized fault schedules** (:func:`generate_schedule`, :func:`run_schedule`): seeded
  schedules of process crashes, worker kills, server crashes and restarts and network faults
  (through a :class:`twopc.faultinject.FaultControl`) at every fault point, each run through
  ``python -m twopc.testing.microjob`` (twopc's Spark writer driven without a JVM) and
  followed by a model check; :func:`shrink_schedule` drops rules while a schedule still
  fails, :class:`ChaosTable` reports a run.

``import twopc`` does not import this package (it imports pytest).
"""

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

__all__ = [
    "CONTRACT_CHECKS",
    "COORDINATOR_CHECKS",
    "DEFAULT_SCHEMA",
    "DEFAULT_SPARK_CONF",
    "DRIVER_CRASH_POINTS",
    "EXECUTOR_POINTS",
    "FAULT_KINDS",
    "PROTOCOL_CHECKS",
    "ChaosTable",
    "ContractReport",
    "ContractViolation",
    "CrashMatrixResult",
    "CrashMatrixTests",
    "Fault",
    "HarnessError",
    "Schedule",
    "ScheduleResult",
    "ScheduleTarget",
    "SinkContractTests",
    "SinkHarness",
    "check_a_wrong_credential_never_shows_in_errors",
    "check_abort_after_commit_is_refused",
    "check_abort_is_idempotent",
    "check_commit_is_idempotent",
    "check_committable_from_a_restarted_driver",
    "check_coordinator_commits_sweeps_and_ignores_replays",
    "check_driver_crash_then_recovery_is_exactly_once",
    "check_handle_round_trips_without_credentials",
    "check_invisible_until_commit_then_exactly_once",
    "check_list_prepared_finds_exactly_the_prepared",
    "check_lost_transaction_is_loud",
    "check_never_prepared_is_lost",
    "check_rollback_leaves_nothing",
    "check_rolled_back_is_lost",
    "check_sink_pickles_after_use",
    "cluster_crash_plan",
    "crash_plan",
    "default_rows",
    "derive_secrets",
    "fresh_nonce",
    "generate_schedule",
    "run_contract",
    "run_crash_matrix",
    "run_schedule",
    "shrink_schedule",
]
