"""Recovery: bring a sink's target to what its ledger decided, after any crash.

:class:`RecoveryCoordinator` commits every decided-but-unfinished batch and rolls back
every orphaned prepared transaction of a sink id. twopc's Spark runtime runs it
automatically at plan time, before any task writes; operators run it by hand with
``python -m recovery`` (see ``--help``). :func:`verify_postgres_ids` checks a table
for exactly-once (duplicates, lost, unexpected, dangling prepared transactions);
:func:`verify_ids` does the same on any SQLAlchemy database, and :func:`staged_rows_left`
counts what the staging mode left behind. ``twopc verify`` checks a live target the same
way in bounded memory (:mod:`twopc.recovery._verify_cli`).
"""

from twopc import RecoveryCoordinator
from twopc.spi import RecoveryPlan, RecoveryReport

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
