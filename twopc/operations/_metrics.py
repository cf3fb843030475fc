"""Prometheus metrics of a twopc sink, kept in ``<checkpointLocation>/twopc/metrics.json`` so they
outlive Spark's restarted workers: the committing process adds each batch's figures (with the
executors' and the target's room); a scrape reads it and the ledger, so the in-doubt gauges are
right even after an unrecorded crash. :mod:`twopc.operations._metrics_export` serves them."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from .._inspect import Headroom
from ..ledger._ledger import CommitLedger

__all__ = ["CHECKPOINT_GAUGES", "COUNTERS", "GAUGES", "HISTOGRAMS", "KNOWN_LABELS", "failing_batch", "load_state",
           "record_batch", "record_failure", "record_recovery"]

log = logging.getLogger("twopc.metrics")

STATE_FILE = "metrics.json"
_FORMAT = 1
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
ROWS_BUCKETS = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000)
HISTOGRAMS: Mapping[str, tuple[tuple[float, ...], str]] = {
    "commit_seconds": (SECONDS_BUCKETS, "Seconds the driver's commit of a batch took (decision, commits, mark, sweep)"),
    "prepare_to_commit_seconds": (SECONDS_BUCKETS, "Seconds from a batch's first prepared transaction to its commit"),
    "batch_rows": (ROWS_BUCKETS, "Rows per committed batch"),
}
#: Label values every counter shows from the start (0 until counted), so alerts on an
#: increase see a series before the first event.
KNOWN_LABELS: Mapping[str, tuple[str, ...]] = {
    "commits": ("committed", "already_committed", "lost", "retried"),
    "batches": ("committed", "finished", "replay-ignored", "aborted"),
    "failures": ("commit", "abort"),
}
COUNTERS: Mapping[str, tuple[str, str | None]] = {
    "commits": ("Transactions the driver committed, by outcome (retried: commit attempts repeated)", "outcome"),
    "batches": ("Batches the driver's commit handled, by action (committed, finished, replay-ignored, aborted)",
                "action"),
    "aborts": ("Transactions rolled back because Spark did not choose their attempt, or the write failed", None),
    "orphans_swept": ("Prepared transactions no decision named, rolled back (retried or dead attempts)", None),
    "recovery_runs": ("Recovery runs that finished a decided batch or rolled back an orphan", None),
    "failures": ("Commits or aborts of a batch that raised, by stage", "stage"),
}
#: Gauges, read at each scrape: name -> (help, extra label or None).
GAUGES: Mapping[str, tuple[str, str | None]] = {
    "in_doubt_transactions": ("Transactions of batches decided but not committed (ledger, at scrape)", None),
    "oldest_in_doubt_seconds": ("Age of the oldest decided-but-uncommitted batch's decision, 0 when none", None),
    "last_commit_timestamp_seconds": ("Unix time the driver's commit or a recovery last finished a batch", None),
    "batch_failed_attempts": (
        ("Runs of the same batch that ended without committing it (Spark aborted it, or its commit raised) since "
         "the last committed batch: a query that fails on one batch at every restart cannot make progress "
         "(batch: which)"), "batch"),
    "target_prepared_transactions": (
        ("Prepared transactions (or staged entries) the target held after the last commit: every user's where "
         "the target has a shared limit (counted: what)"), "counted"),
    "target_prepared_transactions_limit": (
        ("The target's limit on prepared transactions (PostgreSQL max_prepared_transactions) read after the "
         "last commit; absent when the target has none"), "counted"),
}
#: The gauges a collector tells from the checkpoint alone, without the driver's counters or
#: the target: what ``twopc metrics`` serves while the query is down.
CHECKPOINT_GAUGES = ("in_doubt_transactions", "oldest_in_doubt_seconds", "last_commit_timestamp_seconds",
                     "batch_failed_attempts")


def _empty_state() -> dict[str, Any]:
    return {"format": _FORMAT, "labels": {}, "counters": {}, "histograms": {}, "last_commit": None,
            "headroom": None}


def load_state(ledger: CommitLedger) -> dict[str, Any]:
    if (text := ledger.read_aux(STATE_FILE)) is None:
        return _empty_state()
    try:
        state = json.loads(text)
    except ValueError:
        log.warning("twopc: %s/%s is damaged; metrics restart from zero", ledger.location, STATE_FILE)
        return _empty_state()
    return state if isinstance(state, dict) and state.get("format") == _FORMAT else _empty_state()


def _update(ledger: CommitLedger, change: Any) -> None:
    """Read-modify-write the state; metrics never fail a commit (a failure is logged)."""
    try:
        state = load_state(ledger)
        change(state)
        ledger.write_aux(STATE_FILE, json.dumps(state, sort_keys=True))
    except Exception as exc:  # noqa: BLE001 - metrics never fail (or mask the error of) a commit
        log.warning("twopc: could not update the metrics in %s: %s", ledger.location, exc)


def _count(state: dict[str, Any], name: str, label: str = "", by: float = 1) -> None:
    counters = state["counters"].setdefault(name, {})
    counters[label] = counters.get(label, 0) + by


def _observe(state: dict[str, Any], name: str, value: float) -> None:
    buckets = HISTOGRAMS[name][0]
    h = state["histograms"].setdefault(name, {"counts": [0] * (len(buckets) + 1), "sum": 0.0})
    index = next((i for i, le in enumerate(buckets) if value <= le), len(buckets))
    h["counts"][index] += 1
    h["sum"] += value


def failing_batch(state: dict[str, Any]) -> tuple[int, int] | None:
    """The batch whose runs ended without a commit since the last committed batch, and how
    many times (None: the last run of every batch committed)."""
    stuck = state.get("stuck")
    return (int(stuck["batch"]), int(stuck["attempts"])) if stuck else None


def record_batch(ledger: CommitLedger, *, sink_id: str, format_name: str, action: str, committed: int,
                 already_committed: int, aborted: int, swept: int, seconds: float, rows: int,
                 first_prepared_at: float | None, retried: int = 0, headroom: Headroom | None = None,
                 batch_id: int | None = None) -> None:
    """Add one batch's figures (what :class:`~twopc.spi.runtime.BatchResult` and the commit messages say,
    and the target's *headroom* read after the commit)."""
    def change(state: dict[str, Any]) -> None:
        state["labels"] = {"sink_id": sink_id, "format": format_name}
        _count(state, "batches", action)
        if action in ("aborted", "left-for-recovery") and batch_id is not None:  # Spark's abort ends every failed run
            stuck = state.get("stuck")
            attempts = stuck["attempts"] + 1 if stuck and stuck.get("batch") == batch_id else 1
            state["stuck"] = {"batch": batch_id, "attempts": attempts, "at": time.time()}
        elif action in ("committed", "finished", "replay-ignored"):
            state.pop("stuck", None)
        _count(state, "commits", "committed", committed)
        _count(state, "commits", "already_committed", already_committed)
        _count(state, "commits", "retried", retried)
        _count(state, "aborts", "", aborted)
        _count(state, "orphans_swept", "", swept)
        if headroom is not None:
            state["headroom"] = headroom.to_json()
        if action in ("committed", "finished"):
            state["last_commit"] = time.time()
            _observe(state, "commit_seconds", seconds)
            _observe(state, "batch_rows", rows)
            if first_prepared_at:
                _observe(state, "prepare_to_commit_seconds", max(0.0, time.time() - first_prepared_at))
    _update(ledger, change)


def record_failure(ledger: CommitLedger, *, sink_id: str, format_name: str, stage: str, lost: int = 0,
                   retried: int = 0) -> None:
    """Count a commit or abort that raised (and the transactions it found lost, and the commit attempts it repeated)."""
    def change(state: dict[str, Any]) -> None:
        state["labels"] = {"sink_id": sink_id, "format": format_name}
        _count(state, "failures", stage)
        if lost:
            _count(state, "commits", "lost", lost)
        if retried:
            _count(state, "commits", "retried", retried)
    _update(ledger, change)


def record_recovery(ledger: CommitLedger, *, committed: int, rolled_back: int, finished_batches: int) -> None:
    """Count a recovery run that changed something."""
    def change(state: dict[str, Any]) -> None:
        _count(state, "recovery_runs")
        _count(state, "commits", "committed", committed)
        _count(state, "orphans_swept", "", rolled_back)
        _count(state, "batches", "finished", finished_batches)
        if finished_batches:
            state["last_commit"] = time.time()
    _update(ledger, change)
