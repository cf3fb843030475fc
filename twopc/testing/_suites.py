"""Base classes whose inherited tests pytest collects (like zarr's ``StoreTests``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from ._checks import PROTOCOL_CHECKS
from ._coordination import COORDINATOR_CHECKS, DRIVER_CRASH_POINTS, check_driver_crash_then_recovery_is_exactly_once
from ._crash import CrashMatrixResult, Fault, run_crash_matrix
from ._harness import SinkHarness

__all__ = ["CrashMatrixTests", "SinkContractTests"]


class SinkContractTests:
    """The protocol and coordinator checks as tests: subclass as ``Test...`` and provide a ``harness``
    fixture returning a :class:`SinkHarness` on a fresh target (anywhere pytest finds it). Each
    check's docstring says what it guarantees. No Spark; milliseconds to a second each."""

    @pytest.mark.parametrize("point", DRIVER_CRASH_POINTS)
    def test_driver_crash_then_recovery_is_exactly_once(self, harness: SinkHarness, point: str) -> None:
        check_driver_crash_then_recovery_is_exactly_once(harness, point)


def _as_test(check: Callable[[SinkHarness], None]) -> Callable[[SinkContractTests, SinkHarness], None]:
    def test(self: SinkContractTests, harness: SinkHarness) -> None:
        check(harness)
    test.__doc__ = check.__doc__
    return test


for _name, _check in {**PROTOCOL_CHECKS, **COORDINATOR_CHECKS}.items():
    if "[" not in _name:  # the driver-crash check, once per point, is the parametrized test above
        setattr(SinkContractTests, f"test_{_name}", _as_test(_check))


class CrashMatrixTests:
    """The crash matrix through Spark as one test (:func:`run_crash_matrix`), with the same ``harness``
    fixture: 8-10 Spark starts, a few minutes on two cores (mark it slow). Class attributes tune it:
    ``crash_plan``, ``rows_per_batch``, ``partitions``, ``run_timeout_s``, ``spark_conf``."""

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
