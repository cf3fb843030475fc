"""Base classes whose inherited tests pytest collects (like zarr's ``StoreTests``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from ._checks import (
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
    DRIVER_CRASH_POINTS,
    check_coordinator_commits_sweeps_and_ignores_replays,
    check_driver_crash_then_recovery_is_exactly_once,
    check_lost_transaction_is_loud,
)
from ._crash import CrashMatrixResult, Fault, run_crash_matrix
from ._harness import SinkHarness

__all__ = ["CrashMatrixTests", "SinkContractTests"]


class SinkContractTests:
    """The protocol and coordinator checks as tests. Subclass it as ``Test...`` and provide
    a ``harness`` fixture returning a :class:`SinkHarness` on a fresh target (in the class,
    the module or a ``conftest.py``: the base class defines none, so yours is found
    wherever pytest looks). Each check's docstring says what it guarantees. No Spark is
    started; each test takes milliseconds to a second."""

    def test_invisible_until_commit_then_exactly_once(self, harness: SinkHarness) -> None:
        check_invisible_until_commit_then_exactly_once(harness)

    def test_commit_is_idempotent(self, harness: SinkHarness) -> None:
        check_commit_is_idempotent(harness)

    def test_committable_from_a_restarted_driver(self, harness: SinkHarness) -> None:
        check_committable_from_a_restarted_driver(harness)

    def test_rolled_back_is_lost(self, harness: SinkHarness) -> None:
        check_rolled_back_is_lost(harness)

    def test_never_prepared_is_lost(self, harness: SinkHarness) -> None:
        check_never_prepared_is_lost(harness)

    def test_abort_is_idempotent(self, harness: SinkHarness) -> None:
        check_abort_is_idempotent(harness)

    def test_abort_after_commit_is_refused(self, harness: SinkHarness) -> None:
        check_abort_after_commit_is_refused(harness)

    def test_list_prepared_finds_exactly_the_prepared(self, harness: SinkHarness) -> None:
        check_list_prepared_finds_exactly_the_prepared(harness)

    def test_handle_round_trips_without_credentials(self, harness: SinkHarness) -> None:
        check_handle_round_trips_without_credentials(harness)

    def test_sink_pickles_after_use(self, harness: SinkHarness) -> None:
        check_sink_pickles_after_use(harness)

    def test_rollback_leaves_nothing(self, harness: SinkHarness) -> None:
        check_rollback_leaves_nothing(harness)

    def test_a_wrong_credential_never_shows_in_errors(self, harness: SinkHarness) -> None:
        check_a_wrong_credential_never_shows_in_errors(harness)

    def test_coordinator_commits_sweeps_and_ignores_replays(self, harness: SinkHarness) -> None:
        check_coordinator_commits_sweeps_and_ignores_replays(harness)

    @pytest.mark.parametrize("point", DRIVER_CRASH_POINTS)
    def test_driver_crash_then_recovery_is_exactly_once(self, harness: SinkHarness, point: str) -> None:
        check_driver_crash_then_recovery_is_exactly_once(harness, point)

    def test_lost_transaction_is_loud(self, harness: SinkHarness) -> None:
        check_lost_transaction_is_loud(harness)


class CrashMatrixTests:
    """The crash matrix through Spark as one test (see :func:`run_crash_matrix`), with the
    same ``harness`` fixture: about one Spark start per crash plus one, i.e. 8-10 starts,
    a few minutes on two cores. Mark your subclass as slow if your suite separates those.

    Class attributes tune it: ``crash_plan`` (default :func:`crash_plan` for the sink),
    ``rows_per_batch``, ``partitions`` (cycled from run to run), ``run_timeout_s``,
    ``spark_conf`` (added to the job's ``SparkSession``).
    """

    crash_plan: ClassVar[Sequence[Fault] | None] = None
    rows_per_batch: ClassVar[int] = 20
    partitions: ClassVar[Sequence[int]] = (2, 3, 4)
    run_timeout_s: ClassVar[float] = 240.0
    spark_conf: ClassVar[Mapping[str, str] | None] = None

    def test_crash_matrix_through_spark(self, harness: SinkHarness, tmp_path: Path) -> None:
        print(self.run_matrix(harness, tmp_path).summary())  # shown with -rP

    def run_matrix(self, harness: SinkHarness, tmp_path: Path) -> CrashMatrixResult:
        """Run the matrix with the class's settings (override to add sink-specific checks)."""
        return run_crash_matrix(harness, tmp_path, plan=self.crash_plan, rows_per_batch=self.rows_per_batch,
                                partitions=self.partitions, run_timeout_s=self.run_timeout_s,
                                spark_conf=self.spark_conf)
