"""The protocol's named fault points (see :mod:`twopc.faultinject`).

Each name marks an edge of the protocol where a crash leaves a distinct state behind. The chaos suite kills a process
at every one of them and checks exactly-once. The points are declared as data (the entry point
``twopc.fault_points``): a process that passes them unarmed loads nothing of the registry.
"""

from __future__ import annotations

__all__ = ["POINTS"]

POINTS: dict[str, str] = {
    "during_invoke": "executor: after the first record batch went into the open transaction",
    "before_pre_commit": "executor: every row written, transaction not yet prepared",
    "after_pre_commit": "executor: transaction prepared, handle not yet returned to Spark",
    "before_decision": "driver: all handles received, decision not yet recorded",
    "after_decision": "driver: decision durable in the ledger, nothing committed",
    "between_commits": "driver: first handle of the batch committed, the others not",
    "after_commit": "driver: every handle committed, committed mark not yet written",
    "after_mark": "driver: committed mark written, Spark's commits/<batch> not yet",
    "during_recovery": "driver: recovery has finished or rolled back its first transaction",
}
