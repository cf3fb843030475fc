"""The message a Spark task returns to the driver (what :mod:`twopc.spark._spark` sends and
:mod:`twopc.spark._observe` reads)."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import WriterCommitMessage

__all__ = ["TwoPCCommitMessage"]


@dataclass(frozen=True)
class TwoPCCommitMessage(WriterCommitMessage):
    """What a task returns to the driver: its handle as a JSON envelope (``None`` when the
    task wrote nothing) and how many rows it wrote."""

    handle: str | None
    rows: int
    partition_id: int
    attempt_id: int
    prepared_at: float = 0.0
    """Unix seconds when the task's transaction was prepared (0: nothing prepared), for the
    prepare-to-commit metric."""
    epoch: int | None = None
    """The owner epoch the write was planned under: the driver's commit decides under it, and
    is fenced if another actor took the ledger over since (a streaming query's committing
    process cannot learn it otherwise: Spark builds its writer anew, without the plan)."""
