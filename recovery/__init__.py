"""Recovery: bring a sink's target to what its ledger decided, after any crash.

:class:`RecoveryCoordinator` commits every decided-but-unfinished batch and rolls back
every orphaned prepared transaction of a sink id. twopc's Spark runtime runs it
automatically at plan time, before any task writes; operators run it by hand with
``twopc recover`` (see ``--help``). :func:`verify_postgres_ids` checks a table
for exactly-once (duplicates, lost, unexpected, dangling prepared transactions);
:func:`verify_ids` does the same on any SQLAlchemy database, and :func:`staged_rows_left`
counts what the staging mode left behind. ``twopc verify`` checks a live target the same
way in bounded memory (:mod:`twopc.recovery._verify_cli`).
"""


if __name__ != "twopc.recovery":  # this folder imported by its own name, from a checkout
    raise ImportError(f"this folder is the package twopc.recovery, imported here as {__name__!r}: "
                      "import twopc.recovery (the command line is `twopc`)"
                      " (under two names, each class would exist twice)")

from twopc import RecoveryCoordinator
from twopc.spi.operations import RecoveryPlan, RecoveryReport

from ._cli import main
from ._common import build_sink
from ._verify import Verification, staged_rows_left, verify_ids, verify_postgres_ids

__all__ = [
    "RecoveryCoordinator",
    "RecoveryPlan",
    "RecoveryReport",
    "Verification",
    "build_sink",
    "main",
    "staged_rows_left",
    "verify_ids",
    "verify_postgres_ids",
]
