"""Recovery: bring a sink's target to what its ledger decided, after any crash.

:class:`RecoveryCoordinator` commits every decided-but-unfinished batch and rolls back every
orphaned prepared transaction of a sink id; the Spark runtime runs it at plan time, operators
with ``twopc recover``. :func:`verify_ids`, :func:`verify_postgres_ids` and
:func:`staged_rows_left` check a table for exactly-once; ``twopc verify`` does so on a live target."""


if __name__ != "twopc.recovery":  # this folder imported by its own name, from a checkout
    raise ImportError(f"this folder is the package twopc.recovery, imported here as {__name__!r}: "
                      "import twopc.recovery (the command line is `twopc`)"
                      " (under two names, each class would exist twice)")

from twopc import RecoveryCoordinator
from twopc.spi.operations import RecoveryPlan, RecoveryReport

from ._cli import main
from ._common import build_sink
from ._verify import Verification, staged_rows_left, verify_ids, verify_postgres_ids

__all__ = ["RecoveryCoordinator", "RecoveryPlan", "RecoveryReport", "Verification", "build_sink", "main",
           "staged_rows_left", "verify_ids", "verify_postgres_ids"]
